/*
 * test_pg_workers.c -- the queue, the workers and run leases on the
 * PostgreSQL store, against the server tests/pg_run.sh starts for this
 * binary (PL_TEST_PG_URI): the cases are workers_cases.h's, shared with
 * test_workers.c.  Each test works in a schema of its own.
 */
#define W_SUITE pg_workers

#include "workers_cases.h"

static const char *w_store(void)
{
    static char uri[1024];
    const char *base = getenv("PL_TEST_PG_URI");
    cr_assert(base && *base,
              "PL_TEST_PG_URI is not set: run this binary through "
              "tests/pg_run.sh (ctest does), which starts a PostgreSQL server");
    /* a schema per test: the test's temporary directory is unique */
    const char *dir = t_tmpdir();
    const char *tail = strrchr(dir, '/');
    char schema[64];
    size_t n = 0;
    for (const char *p = tail ? tail + 1 : dir; *p && n < 40; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))
            schema[n++] = *p;
        else if (*p >= 'A' && *p <= 'Z')
            schema[n++] = (char)(*p - 'A' + 'a');
    schema[n] = '\0';
    snprintf(uri, sizeof uri, "%s%cschema=w_%s", base,
             strchr(base, '?') ? '&' : '?', schema);
    return uri;
}
