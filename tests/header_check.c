/* The public headers compile alone under -std=c11 -pedantic -Werror. */
#include <policyledger.h>
#include <policyledger_llm.h>
#include <policyledger_mcp.h>

int pl_header_check_dummy(void);
int pl_header_check_dummy(void) { return PL_OK; }
