/*
 * test_workers.c -- the queue, the workers and run leases on the LMDB store
 * (many processes, one host): the cases are workers_cases.h's, shared with
 * test_pg_workers.c.
 */
#define W_SUITE workers

#include "workers_cases.h"

static const char *w_store(void) { return t_store_path(); }
