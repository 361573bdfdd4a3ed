/* The public headers compile alone under -std=c11 -pedantic -Werror. */
#include <policyledger.h>
#include <policyledger_llm.h>
#include <policyledger_mcp.h>

int pl_header_check_dummy(void);
int pl_header_check_dummy(void) { return PL_OK; }

/* A plugin's two symbols, defined as a plugin does. */
PL_PLUGIN_DECLARE;
int pl_plugin_init(pl_registry *reg) { return reg ? PL_OK : PL_EINVAL; }
