/*
 * test_plugin.c -- pl_plugin_load(): a good plugin registers its policies
 * with its code identity, which its calls record; every way loading can
 * fail gives its own status and message and leaves the registry as it was.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <fcntl.h>
#include <policyledger.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pl-plugin-XXXXXX", tmp ? tmp : "/tmp");
    cr_assert(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(plugin, .init = setup, .fini = teardown);

static const char *plugin(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s.so", PL_TEST_PLUGIN_DIR, name);
    return path;
}

static const char *tmpfile_with(const char *name, const char *bytes, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
    return path;
}

static int mine(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_text(out, NULL, "mine");
}

/* A registry holding one policy of our own, "p_echo": the good plugin's
 * first name, so loading it collides. */
static pl_registry *registry_with_own(const char *name)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = mine;
    d.code_version = "mine/1";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    return reg;
}

/* The registry holds exactly our own policy, untouched. */
static void expect_untouched(const pl_registry *reg, const char *name)
{
    cr_expect_eq(pl_registry_count(reg), 1);
    const pl_policy_def *d = pl_registry_find(reg, name);
    cr_assert(d);
    cr_expect(d->fn == mine);
    cr_expect_str_eq(d->code_version, "mine/1");
}

static void expect_refused(const char *path, int status, const char *words)
{
    pl_registry *reg = registry_with_own("own");
    int st = pl_plugin_load(reg, path);
    cr_expect_eq(st, status, "%s: %s (%s)", path, pl_status_name(st),
                 pl_errmsg());
    cr_expect(strstr(pl_errmsg(), words), "'%s' not in: %s", words,
              pl_errmsg());
    cr_expect(strstr(pl_errmsg(), path), "path not named: %s", pl_errmsg());
    expect_untouched(reg, "own");
    pl_registry_free(reg);
}

static bool is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdef", s[i]))
            return false;
    return true;
}

Test(plugin, registers_its_policies_with_its_build_id)
{
    pl_registry *reg = registry_with_own("own");
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(pl_registry_count(reg), 4);
    const pl_policy_def *echo = pl_registry_find(reg, "p_echo");
    const pl_policy_def *root = pl_registry_find(reg, "p_root");
    cr_assert(echo && root);
    cr_expect_str_eq(echo->description, "Returns its payload.");
    cr_assert(echo->code_version);
    cr_expect_eq(strncmp(echo->code_version, "build-id:", 9), 0, "%s",
                 echo->code_version);
    /* the note's bytes in hex: 20 of them from GNU ld and gold (SHA-1),
     * 8 from lld (its "fast" id) */
    size_t id_len = strlen(echo->code_version + 9);
    cr_expect(id_len == 40 || id_len == 16, "%s", echo->code_version);
    cr_expect(is_hex(echo->code_version + 9, id_len), "%s", echo->code_version);
    cr_expect_str_eq(root->code_version, echo->code_version);
    /* a code_version given at registration wins */
    cr_expect_str_eq(pl_registry_find(reg, "p_versioned")->code_version,
                     "versioned/7");
    cr_expect(pl_registry_find(reg, "own")->fn == mine);
    pl_registry_free(reg);
}

Test(plugin, a_file_without_build_id_is_known_by_its_sha256)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_no_build_id")), PL_OK, "%s",
                 pl_errmsg());
    const char *code = pl_registry_find(reg, "n_echo")->code_version;
    cr_assert(code);
    cr_expect_eq(strncmp(code, "sha256:", 7), 0, "%s", code);
    cr_expect(is_hex(code + 7, 64), "%s", code);
    /* the same digest sha256sum computes */
    char cmd[1200], line[128] = "";
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", plugin("plugin_no_build_id"));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    cr_assert(fgets(line, sizeof line, p));
    pclose(p);
    cr_expect_eq(strncmp(line, code + 7, 64), 0, "%s vs %s", line, code);
    pl_registry_free(reg);
}

Test(plugin, its_calls_record_its_code_identity)
{
    char store[600];
    snprintf(store, sizeof store, "%s/store.db", g_dir);
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_engine_open(&e, store, reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    cJSON *payload = cJSON_Parse("{\"x\":1}");
    pl_action root = PL_ACTION_INIT;
    root.policy = "p_root";
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "r1";
    cr_assert_eq(pl_run_start(&o, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);

    pl_steps *ledger = NULL;
    cr_assert_eq(pl_run_ledger(&ledger, e, "r1", "0"), PL_OK, "%s",
                 pl_errmsg());
    const pl_step *call = pl_steps_at(ledger, 0);
    cr_assert(call);
    cr_assert_eq(pl_step_type_of(call), PL_STEP_ACTION_CALL);
    cr_assert(pl_step_code(call));
    cr_expect_str_eq(pl_step_code(call),
                     pl_registry_find(reg, "p_echo")->code_version);
    pl_steps_free(ledger);
    cJSON_Delete(payload);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(plugin, two_plugins_side_by_side)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_other")), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(pl_registry_count(reg), 6);
    cr_expect_str_neq(pl_registry_find(reg, "p_echo")->code_version,
                      pl_registry_find(reg, "q_echo")->code_version);
    pl_registry_free(reg);
}

Test(plugin, a_missing_file)
{
    char path[600];
    snprintf(path, sizeof path, "%s/nothing-here.so", g_dir);
    expect_refused(path, PL_ENOTFOUND, "no such file");
}

Test(plugin, a_file_that_is_not_a_shared_object)
{
    const char *text = "#!/bin/sh\necho hello\n";
    expect_refused(tmpfile_with("script.so", text, strlen(text)), PL_EPLUGIN,
                   "not a loadable shared object");
    expect_refused(tmpfile_with("empty.so", "", 0), PL_EPLUGIN,
                   "not a loadable shared object");
    /* an ELF header and nothing else */
    static const char elf[] = "\177ELF\002\001\001\000\000\000\000\000";
    expect_refused(tmpfile_with("stub.so", elf, sizeof elf), PL_EPLUGIN,
                   "not a loadable shared object");
    expect_refused(g_dir, PL_EPLUGIN, "not a regular file");
}

Test(plugin, a_shared_object_that_is_not_a_plugin)
{
    expect_refused(plugin("plugin_no_abi"), PL_EPLUGIN, "pl_plugin_abi");
    expect_refused(plugin("plugin_no_entry"), PL_EPLUGIN,
                   "no entry point 'pl_plugin_init'");
}

Test(plugin, a_plugin_with_an_unresolved_symbol)
{
    expect_refused(plugin("plugin_undefined"), PL_EPLUGIN,
                   "pl_test_function_nobody_defines");
}

Test(plugin, an_abi_mismatch)
{
    expect_refused(plugin("plugin_abi_999"), PL_EVERSION,
                   "built for ABI version 999");
}

Test(plugin, a_name_already_registered)
{
    pl_registry *reg = registry_with_own("p_root");
    int st = pl_plugin_load(reg, plugin("plugin_good"));
    cr_expect_eq(st, PL_EEXIST, "%s", pl_status_name(st));
    cr_expect(strstr(pl_errmsg(), "'p_root' is registered already"), "%s",
              pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "plugin_good.so"), "%s", pl_errmsg());
    expect_untouched(reg, "p_root");
    pl_registry_free(reg);

    /* the same plugin twice: the second load changes nothing */
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_OK);
    cr_expect_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_EEXIST);
    cr_expect_eq(pl_registry_count(reg), 3);
    pl_registry_free(reg);
}

Test(plugin, an_entry_point_that_fails)
{
    expect_refused(plugin("plugin_fail_after_one"), PL_EINVAL,
                   "entry point failed with PL_EINVAL");
    expect_refused(plugin("plugin_fail_odd"), PL_EPLUGIN,
                   "a status that is not a pl_status");
    /* neither set a message of its own: none is made up ("no error") */
    cr_expect(!strstr(pl_errmsg(), "no error"), "%s", pl_errmsg());
    cr_expect(!strstr(pl_errmsg(), "("), "%s", pl_errmsg());
}

/* An entry point that registers nothing and says PL_OK loaded with no
 * word: the program, or `ledger-replay --plugin`, went on as if the
 * plugin's policies were there.  A plugin is a shared object that
 * registers policies (docs/guide.md, Plugins): one that registers none is
 * refused, and nothing of it stays loaded. */
Test(plugin, an_entry_point_that_registers_nothing)
{
    expect_refused(plugin("plugin_empty"), PL_EPLUGIN,
                   "its entry point registered no policy");
}

Test(plugin, bad_arguments)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_expect_eq(pl_plugin_load(NULL, plugin("plugin_good")), PL_EINVAL);
    cr_expect_eq(pl_plugin_load(reg, NULL), PL_EINVAL);
    cr_expect_eq(pl_plugin_load(reg, ""), PL_EINVAL);
    cr_expect_eq(pl_registry_count(reg), 0);
    pl_registry_free(reg);
}

Test(plugin, an_llm_policy_registered_by_a_plugin_outlives_its_loading)
{
    const char *text = "{\"responses\": [{\"text\": \"hello from a plugin\"}]}";
    const char *script = tmpfile_with("script.json", text, strlen(text));
    setenv("PL_TEST_LLM_SCRIPT", script, 1);
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_llm")), PL_OK, "%s",
                 pl_errmsg());
    char store[512];
    snprintf(store, sizeof store, "%s/store.db", g_dir);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, NULL), PL_OK, "%s",
                 pl_errmsg());
    cJSON *p = cJSON_Parse("{\"text\": \"hi\"}");
    pl_action a = PL_ACTION_INIT;
    a.policy = "p_model";
    a.payload = p;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &a, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(pl_outcome_result(o),
                                                      "text");
    cr_expect(cJSON_IsString(t) &&
              strcmp(t->valuestring, "hello from a plugin") == 0);
    pl_outcome_free(o);
    cJSON_Delete(p);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Data a plugin's policy owns is released by the plugin's own code, so it
 * runs before the object is unloaded, and a run of the policy still finds
 * it (several plugins, and the registry freed after an engine used it). */
Test(plugin, a_plugin_releases_its_own_data_before_it_is_unloaded)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_owned")), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_plugin_load(reg, plugin("plugin_good")), PL_OK, "%s",
                 pl_errmsg());
    const pl_policy_def *d = pl_registry_find(reg, "w_echo");
    cr_assert(d && d->user);
    cr_expect_eq(*(const int *)d->user, 7);
    pl_registry_free(reg); /* calls the plugin's release, then unloads it */
}
