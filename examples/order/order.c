/*
 * order.c -- the order workflow's policies.
 *
 * Built twice: into a static library the tests link, where each policy
 * names its code version, and into the plugin (order_plugin.c, built with
 * ORDER_PLUGIN), where the plugin's build-id is every policy's code identity.
 * ORDER_VARIANT=2 builds a changed workflow (ship is asked for express
 * delivery), to show what a deploy check reports about such a change;
 * ORDER_VARIANT=3 the same change behind a version gate (pl_ctx_version),
 * which runs recorded by the first workflow replay on their old branch;
 * ORDER_VARIANT=4 the gate at version 2, whose runs variant 3, older code,
 * leaves for it (PL_ENEWERCODE).
 */
#define _POSIX_C_SOURCE 200809L
#include "order.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ORDER_PLUGIN
#define CODE_VERSION(v) NULL
#else
#define CODE_VERSION(v) (v)
#endif
#ifndef ORDER_VARIANT
#define ORDER_VARIANT 1
#endif

/* ---- the outside world: an append-only effects file ---------------------- */

/* Append one line; O_APPEND keeps concurrent writers' lines whole. */
static int effect_write(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        return -1;
    size_t n = strlen(line);
    ssize_t w = write(fd, line, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* Has a line with this tool and key been written?  (The payment provider's
 * idempotency-key table.) */
static int effect_seen(const char *path, const char *tool, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[1024];
    size_t tl = strlen(tool), kl = strlen(key);
    int seen = 0;
    while (!seen && fgets(line, sizeof line, f))
        seen = strncmp(line, tool, tl) == 0 && line[tl] == ' ' &&
               strncmp(line + tl + 1, key, kl) == 0 && line[tl + 1 + kl] == ' ';
    fclose(f);
    return seen;
}

/* A short deterministic reference derived from a key (FNV-1a). */
static unsigned long ref_of(const char *s)
{
    unsigned long h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h & 0xffffffu;
}

/* ---- tools ---------------------------------------------------------------- */

static int reserve_stock(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    const char *order;
    const cJSON *items;
    if (pl_json_unpack(a->payload, "{s:s, s:o}", "order_id", &order, "items",
                       &items) ||
        !cJSON_IsArray(items))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "reserve_stock needs order_id and items");
    char line[512], res[64];
    snprintf(res, sizeof res, "R-%s", order);
    snprintf(line, sizeof line, "reserve_stock %s %d item(s) for %s\n",
             pl_ctx_idempotency_key(ctx), cJSON_GetArraySize(items), order);
    if (effect_write(user, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "the warehouse is unreachable");
    return pl_steps_add_resultf(out, "{s:s}", "reservation", res);
}

static int charge_card(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    const char *order;
    double amount;
    if (pl_json_unpack(a->payload, "{s:s, s:f}", "order_id", &order,
                       "amount_cents", &amount) ||
        amount <= 0)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "charge_card needs order_id and a positive "
                                  "amount_cents");
    const char *key = pl_ctx_idempotency_key(ctx);
    char charge[64], line[512];
    snprintf(charge, sizeof charge, "ch_%06lx", ref_of(key));
    /* the provider charges each idempotency key once */
    if (!effect_seen(user, "charge_card", key)) {
        snprintf(line, sizeof line, "charge_card %s %.0f cents for %s\n", key,
                 amount, order);
        if (effect_write(user, line))
            return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                      "the payment provider is unreachable");
    }
    return pl_steps_add_resultf(out, "{s:s, s:s}", "charge", charge, "status",
                                "captured");
}

static int ship(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    const char *order, *res;
    if (pl_json_unpack(a->payload, "{s:s, s:s}", "order_id", &order,
                       "reservation", &res))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "ship needs order_id and reservation");
    char line[512], tracking[64];
    snprintf(tracking, sizeof tracking, "TRK-%s", order);
    snprintf(line, sizeof line, "ship %s %s via %s\n",
             pl_ctx_idempotency_key(ctx), order, res);
    if (effect_write(user, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "the carrier is unreachable");
    return pl_steps_add_resultf(out, "{s:s}", "tracking", tracking);
}

/* ---- the workflow ----------------------------------------------------------- */

/*
 * Reserve, charge, ship.  A failed reservation or charge (an error result,
 * PL_ERESULT) ends the order with that error as its result; a failed
 * shipment leaves it charged, not shipped.  Any other status stops the run.
 */
static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *id, *res, *charge, *trk = NULL;
    const cJSON *items;
    double amount;
    if (pl_json_unpack(a->payload, "{s:s, s:o, s:f}", "order_id", &id, "items",
                       &items, "amount_cents", &amount))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "an order needs order_id, items and "
                                  "amount_cents");
    cJSON *reserved = NULL, *charged = NULL, *shipped = NULL;
    int st = pl_ctx_invokef(&reserved, ctx, "reserve_stock", "{s:s, s:O}",
                            "order_id", id, "items", items);
    if (!st)
        st = pl_json_unpack(reserved, "{s:s}", "reservation", &res);
    if (!st)
        st = pl_ctx_invokef(&charged, ctx, "charge_card", "{s:s, s:f}",
                            "order_id", id, "amount_cents", amount);
    if (st == PL_ERESULT) {
        st = pl_steps_add_result(out, charged ? charged : reserved);
        goto done;
    }
    if (!st)
        st = pl_json_unpack(charged, "{s:s}", "charge", &charge);
#if ORDER_VARIANT == 3
    /* express delivery, for orders that reach this point from now on */
    int express = 0;
    if (!st)
        st = pl_ctx_version(&express, ctx, "express-shipping",
                            PL_VERSION_DEFAULT, 1);
#elif ORDER_VARIANT == 4
    int express = 0; /* the gate at version 2 */
    if (!st)
        st = pl_ctx_version(&express, ctx, "express-shipping",
                            PL_VERSION_DEFAULT, 2);
#elif ORDER_VARIANT == 2
    int express = 1;
#else
    int express = 0;
#endif
    if (!st && express >= 1)
        st = pl_ctx_invokef(&shipped, ctx, "ship", "{s:s, s:s, s:b}",
                            "order_id", id, "reservation", res, "express", 1);
    else if (!st)
        st = pl_ctx_invokef(&shipped, ctx, "ship", "{s:s, s:s}", "order_id", id,
                            "reservation", res);
    if (st == PL_ERESULT) /* not shipped: the order stays charged */
        st = PL_OK;
    else if (!st)
        st = pl_json_unpack(shipped, "{s:s}", "tracking", &trk);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:s, s:s, s:s, s:s*}", "order_id", id,
                                  "status",
                                  trk ? "shipped" : "charged, not shipped",
                                  "charge", charge, "tracking", trk);
done:
    cJSON_Delete(reserved);
    cJSON_Delete(charged);
    cJSON_Delete(shipped);
    return st;
}

int order_register(pl_registry *reg, const char *effects_path)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    int st;
    d.name = "order";
    d.fn = order;
    d.description = "Reserve stock, charge the card, ship.";
    d.code_version = CODE_VERSION("order/1");
    if ((st = pl_registry_add(reg, &d)))
        return st;

    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "reserve_stock";
    d.fn = reserve_stock;
    d.user = (void *)effects_path;
    d.description = "Reserve the order's items in the warehouse.";
    d.input_schema = "{\"type\":\"object\",\"required\":[\"order_id\","
                     "\"items\"]}";
    d.code_version = CODE_VERSION("reserve_stock/1");
    if ((st = pl_registry_add(reg, &d)))
        return st;

    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "charge_card";
    d.fn = charge_card;
    d.user = (void *)effects_path;
    d.description = "Charge the customer's card (idempotent per key at the "
                    "provider).";
    d.input_schema = "{\"type\":\"object\",\"required\":[\"order_id\","
                     "\"amount_cents\"]}";
    d.idempotent = false;           /* a charge must not be silently repeated */
    d.in_doubt = PL_IN_DOUBT_RERUN; /* safe: the provider dedupes the key */
    d.code_version = CODE_VERSION("charge_card/1");
    if ((st = pl_registry_add(reg, &d)))
        return st;

    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "ship";
    d.fn = ship;
    d.user = (void *)effects_path;
    d.description = "Hand the order to the carrier.";
    d.code_version = CODE_VERSION("ship/1");
    return pl_registry_add(reg, &d);
}
