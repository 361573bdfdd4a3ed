/*
 * test_static_host.c -- a program linked with the static library cannot
 * load a plugin (which links the shared one): the plugin would run a
 * second copy of the library, with its own state.  pl_plugin_load()
 * refuses it with PL_EPLUGIN, before the plugin's entry point runs, and
 * leaves the registry as it was.
 */
#include <criterion/criterion.h>
#include <policyledger.h>
#include <stdio.h>
#include <string.h>

static int mine(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_text(out, NULL, "mine");
}

Test(static_host, a_plugin_is_refused_with_a_clear_error)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "own";
    d.fn = mine;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    const char *path = PL_TEST_ABI_DIR "/plugin_hidden.so";
    cr_expect_eq(pl_plugin_load(reg, path), PL_EPLUGIN);
    const char *m = pl_errmsg();
    char so[64];
    snprintf(so, sizeof so, "libpolicyledger.so.%d", PL_ABI_VERSION);
    cr_expect(strstr(m, path), "%s", m);
    cr_expect(strstr(m, "a second copy beside the one loading it"), "%s", m);
    cr_expect(strstr(m, "must link the shared library"), "%s", m);
    cr_expect(strstr(m, so), "%s", m);
    cr_expect_eq(pl_registry_count(reg), 1);
    cr_expect_null(pl_registry_find(reg, "h_echo"));
    pl_registry_free(reg);
}
