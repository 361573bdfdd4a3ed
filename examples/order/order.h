/*
 * order.h -- a small durable workflow: reserve stock, charge a card, ship.
 *
 * Each step is a tool policy whose real side effect is a line appended to an
 * effects file ("the outside world").  charge_card behaves like a payment
 * provider that honours idempotency keys: it charges a key once and answers
 * a repeat with the first charge.  reserve_stock and ship are naive, so a
 * crash between their effect and their durable result shows up as a repeated
 * line: the at-least-once window the idempotency key exists to close.
 */
#ifndef ORDER_H
#define ORDER_H

#include <policyledger.h>

/* Register order, reserve_stock, charge_card and ship.  @p effects_path is
 * borrowed and must outlive the registry's use. */
int order_register(pl_registry *reg, const char *effects_path);

/* The sample order the demo and the tests run. */
cJSON *order_sample(const char *order_id);

#endif
