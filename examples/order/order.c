/*
 * order.c -- the order workflow's policies.
 */
#define _POSIX_C_SOURCE 200809L
#include "order.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static const char *str_field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A short deterministic reference derived from a key (FNV-1a). */
static unsigned long ref_of(const char *s)
{
    unsigned long h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h & 0xffffffu;
}

static int result_with(pl_steps *out, const char *k1, const char *v1,
                       const char *k2, const char *v2)
{
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddStringToObject(r, k1, v1) ||
        (k2 && !cJSON_AddStringToObject(r, k2, v2))) {
        cJSON_Delete(r);
        return PL_ENOMEM;
    }
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* ---- tools ---------------------------------------------------------------- */

static int reserve_stock(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                         void *user)
{
    const char *order = str_field(a->payload, "order_id");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(a->payload, "items");
    if (!order || !cJSON_IsArray(items))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "reserve_stock needs order_id and items");
    char line[512], res[64];
    snprintf(res, sizeof res, "R-%s", order);
    snprintf(line, sizeof line, "reserve_stock %s %d item(s) for %s\n",
             pl_ctx_idempotency_key(ctx), cJSON_GetArraySize(items), order);
    if (effect_write(user, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "the warehouse is unreachable");
    return result_with(out, "reservation", res, NULL, NULL);
}

static int charge_card(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    const char *order = str_field(a->payload, "order_id");
    const cJSON *amount = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                           "amount_cents");
    if (!order || !cJSON_IsNumber(amount) || amount->valuedouble <= 0)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "charge_card needs order_id and a positive "
                                  "amount_cents");
    const char *key = pl_ctx_idempotency_key(ctx);
    char charge[64], line[512];
    snprintf(charge, sizeof charge, "ch_%06lx", ref_of(key));
    /* the provider charges each idempotency key once */
    if (!effect_seen(user, "charge_card", key)) {
        snprintf(line, sizeof line, "charge_card %s %.0f cents for %s\n", key,
                 amount->valuedouble, order);
        if (effect_write(user, line))
            return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                      "the payment provider is unreachable");
    }
    return result_with(out, "charge", charge, "status", "captured");
}

static int ship(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    const char *order = str_field(a->payload, "order_id");
    const char *res = str_field(a->payload, "reservation");
    if (!order || !res)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "ship needs order_id and reservation");
    char line[512], tracking[64];
    snprintf(tracking, sizeof tracking, "TRK-%s", order);
    snprintf(line, sizeof line, "ship %s %s via %s\n",
             pl_ctx_idempotency_key(ctx), order, res);
    if (effect_write(user, line))
        return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                  "the carrier is unreachable");
    return result_with(out, "tracking", tracking, NULL, NULL);
}

/* ---- the workflow ----------------------------------------------------------- */

/* Call @p policy with @p payload; on an error result, finish the order with
 * it.  Returns PL_OK and the result in *out, or a status. */
static int step(pl_ctx *ctx, const char *policy, cJSON *payload,
                pl_step **out)
{
    pl_action a = {PL_ACTION_VERSION, policy, payload, NULL, 0, NULL};
    int st = pl_ctx_call(out, ctx, &a, NULL, 0);
    cJSON_Delete(payload);
    return st;
}

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *id = str_field(a->payload, "order_id");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(a->payload, "items");
    const cJSON *amount = cJSON_GetObjectItemCaseSensitive(a->payload,
                                                           "amount_cents");
    if (!id || !items || !amount)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "an order needs order_id, items and "
                                  "amount_cents");
    pl_step *reserved = NULL, *charged = NULL, *shipped = NULL;
    int st;

    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "order_id", id);
    cJSON_AddItemToObject(p, "items", cJSON_Duplicate(items, 1));
    if ((st = step(ctx, "reserve_stock", p, &reserved)))
        goto done;
    if (pl_step_is_error(reserved)) {
        st = pl_steps_add_result(out, pl_step_payload(reserved));
        goto done;
    }

    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "order_id", id);
    cJSON_AddNumberToObject(p, "amount_cents", amount->valuedouble);
    if ((st = step(ctx, "charge_card", p, &charged)))
        goto done;
    if (pl_step_is_error(charged)) {
        st = pl_steps_add_result(out, pl_step_payload(charged));
        goto done;
    }

    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "order_id", id);
    cJSON_AddStringToObject(p, "reservation",
                            str_field(pl_step_payload(reserved),
                                      "reservation"));
    if ((st = step(ctx, "ship", p, &shipped)))
        goto done;

    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "order_id", id);
    cJSON_AddStringToObject(r, "status",
                            pl_step_is_error(shipped) ? "charged, not shipped"
                                                      : "shipped");
    cJSON_AddStringToObject(r, "charge",
                            str_field(pl_step_payload(charged), "charge"));
    const char *trk = str_field(pl_step_payload(shipped), "tracking");
    if (trk)
        cJSON_AddStringToObject(r, "tracking", trk);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
done:
    pl_step_free(reserved);
    pl_step_free(charged);
    pl_step_free(shipped);
    return st;
}

int order_register(pl_registry *reg, const char *effects_path)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    int st;
    d.name = "order";
    d.fn = order;
    d.description = "Reserve stock, charge the card, ship.";
    d.code_version = "order/1";
    if ((st = pl_registry_add(reg, &d)))
        return st;

    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "reserve_stock";
    d.fn = reserve_stock;
    d.user = (void *)effects_path;
    d.description = "Reserve the order's items in the warehouse.";
    d.input_schema = "{\"type\":\"object\",\"required\":[\"order_id\","
                     "\"items\"]}";
    d.code_version = "reserve_stock/1";
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
    d.idempotent = false; /* a charge must not be silently repeated */
    d.in_doubt = PL_IN_DOUBT_RERUN; /* safe: the provider dedupes the key */
    d.code_version = "charge_card/1";
    if ((st = pl_registry_add(reg, &d)))
        return st;

    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "ship";
    d.fn = ship;
    d.user = (void *)effects_path;
    d.description = "Hand the order to the carrier.";
    d.code_version = "ship/1";
    return pl_registry_add(reg, &d);
}

cJSON *order_sample(const char *order_id)
{
    cJSON *o = cJSON_CreateObject(), *items = cJSON_CreateArray();
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "sku", "MUG-BLUE");
    cJSON_AddNumberToObject(it, "qty", 2);
    cJSON_AddItemToArray(items, it);
    it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "sku", "TEA-EARLGREY");
    cJSON_AddNumberToObject(it, "qty", 1);
    cJSON_AddItemToArray(items, it);
    cJSON_AddStringToObject(o, "order_id", order_id);
    cJSON_AddItemToObject(o, "items", items);
    cJSON_AddNumberToObject(o, "amount_cents", 4200);
    cJSON_AddStringToObject(o, "card", "tok_visa_4242");
    return o;
}
