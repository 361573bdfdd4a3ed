/*
 * workflow_plugin.c -- the order workflow of test_workflow.c
 * (support_workflow.h) as a plugin, for ledger-replay --check on the
 * stores the test leaves.
 */
#include "support_workflow.h"

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg) { return workflow_register(reg); }
