/* The public header compiles alone under -std=c11 -pedantic -Werror. */
#include <policyledger.h>

int pl_header_check_dummy(void);
int pl_header_check_dummy(void) { return PL_OK; }
