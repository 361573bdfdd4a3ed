/*
 * sample.c -- the sample order the demo and the tests run.
 */
#include "order.h"

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
