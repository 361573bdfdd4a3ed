/*
 * support_time.h -- what the tests of durable timers, events,
 * cancellation and deadlines (test_time*.c) share (support_time.c).
 */
#ifndef PL_TESTS_SUPPORT_TIME_H
#define PL_TESTS_SUPPORT_TIME_H

#include "support.h"

#include <stdatomic.h>
#include <stdint.h>

/* Calls of "undo" and of "inflight" so far. */
extern atomic_int g_undo, g_inflight;

/* Calls of "book" so far; set, "book" stops the engine's workers and
 * "saga" dies after "book" (support_time.c). */
extern atomic_int g_booked, g_book_stops, g_saga_dies;

/* What the compensation of "undo_waits" got from its wait. */
extern atomic_int g_comp_wait;

/* t_registry() and the policies of these tests: "sleeper", "undo",
 * "waiter", "inflight", "cancel_me", "nested", "book", "saga", "undo_waits". */
pl_registry *registry(void);
/* An engine on a new store that parks every waiting run (no wait in
 * place). */
pl_engine *engine_parking(const pl_registry *reg);
/* The run's record (free it with pl_run_info_free()). */
pl_run_info *info_of(pl_engine *e, const char *id);
/* The Unix time now, in ms. */
int64_t now_ms(void);
/* Sleep @p ms milliseconds. */
void nap_ms(long ms);
/* Wake due runs until run @p id is no longer waiting. */
void wake_until_done(pl_engine *e, const char *id);
/* The outcome's result. */
const cJSON *result_of(const pl_outcome *o);

#endif
