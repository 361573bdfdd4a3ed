/*
 * test_optional.c -- a build without an optional part (PL_WITH_POSTGRESQL,
 * PL_WITH_CURL off) refuses what needs it with a clear error, and keeps the
 * rest: LMDB stores, the scripted model, the tools but http_get.  In a build
 * with both parts these tests are skipped (the parts' own tests run there).
 */
#include "support.h"

#include <policyledger_llm.h>
#include <string.h>

Test(optional, a_postgresql_uri_without_postgresql_is_refused)
{
    if (PL_WITH_POSTGRESQL)
        cr_skip_test("built with PostgreSQL: the store's tests run instead");
    pl_registry *reg = t_registry();
    pl_engine *e = NULL;
    const char *uris[] = {"postgresql://127.0.0.1/db",
                          "postgres://user@host:5432/db"};
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(pl_engine_open(&e, uris[i], reg, NULL), PL_EINVAL);
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), "built without PostgreSQL support"), "%s",
                  pl_errmsg());
        cr_assert(strstr(pl_errmsg(), uris[i]), "%s", pl_errmsg());
    }
    /* LMDB is there */
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(optional, http_models_without_libcurl_are_refused_scripted_ones_work)
{
    if (PL_WITH_CURL)
        cr_skip_test("built with libcurl: the HTTP parts' tests run instead");
    pl_registry *reg = t_registry();
    const char *models[] = {"openai://gpt-4o", "anthropic://claude",
                            "ollama://127.0.0.1:11434/llama3",
                            "gemini://gemini-pro"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(pl_llm_register(reg, "agent", models[i], NULL, NULL),
                     PL_EINVAL, "%s", models[i]);
        cr_assert(strstr(pl_errmsg(), "built without libcurl"), "%s",
                  pl_errmsg());
        cr_assert_null(pl_registry_find(reg, "agent"));
    }
    char script[1024];
    snprintf(script, sizeof script, "%s/script.json", t_tmpdir());
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("{\"responses\": [{\"text\": \"hello\"}]}", f);
    fclose(f);
    char url[1100];
    snprintf(url, sizeof url, "scripted://%s", script);
    cr_assert_eq(pl_llm_register(reg, "agent", url, NULL, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_registry_free(reg);
}

Test(optional, the_otel_exporter_and_http_get_without_libcurl_are_absent)
{
    if (PL_WITH_CURL)
        cr_skip_test("built with libcurl: the HTTP parts' tests run instead");
    pl_otel *x = (pl_otel *)1;
    cr_assert_eq(pl_otel_open(&x, NULL), PL_EIO);
    cr_assert_null(x);
    cr_assert(strstr(pl_errmsg(), "built without libcurl"), "%s", pl_errmsg());

    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    const char *allow[] = {"http://127.0.0.1"};
    o.allow = allow;
    o.n_allow = 1;
    pl_tools *t = NULL;
    cr_assert_eq(pl_tools_new(&t, &o), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "http_get"), "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "built without libcurl"), "%s", pl_errmsg());

    /* the defaults hold no http:// entry: the other tools register */
    cr_assert_eq(pl_tools_new(&t, NULL), PL_OK, "%s", pl_errmsg());
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_tools_register(reg, t), PL_OK, "%s", pl_errmsg());
    cr_assert_not_null(pl_registry_find(reg, "calculator"));
    cr_assert_null(pl_registry_find(reg, "http_get"));
    pl_registry_free(reg);
    pl_tools_free(t);
}
