/*
 * test_registry.c -- policies by name (core/engine/registry.c).
 */
#include "support.h"

#include <stdio.h>

static int noop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return PL_OK;
}

Test(registry, add_find_and_order)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "policy_%d", i);
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = name;
        d.fn = noop;
        d.description = "a policy";
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    cr_assert_eq(pl_registry_count(reg), 100);
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "policy_%d", i);
        const pl_policy_def *d = pl_registry_find(reg, name);
        cr_assert_not_null(d, "%s", name);
        cr_assert_str_eq(d->name, name);
        cr_assert_str_eq(d->description, "a policy");
        cr_assert(d->idempotent, "idempotent is the default");
        cr_assert_eq(pl_registry_at(reg, (size_t)i), d, "registration order");
    }
    cr_assert_null(pl_registry_find(reg, "policy_100"));
    cr_assert_null(pl_registry_find(reg, "policy_1 "));
    cr_assert_null(pl_registry_at(reg, 100));
    pl_registry_free(reg);
}

Test(registry, rejects_bad_registrations)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.fn = noop;

    d.name = "";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    d.name = "tab\there";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    d.name = "del\x7f";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    d.name = "not\xffutf8";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    /* the controls refused are C0 and DEL: a C1 character (U+0085) is
     * text, which the tools escape when they print it */
    d.name = "c1\xc2\x85";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    char longname[PL_MAX_NAME + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    d.name = longname;
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);

    d.name = "ok";
    d.fn = NULL;
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "no function") != NULL, "%s", pl_errmsg());
    d.fn = noop;

    d.input_schema = "[1, 2]";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EJSON);
    d.input_schema = "{not json";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EJSON);
    /* cJSON would cut the string at its NUL: "a" would be the constant */
    d.input_schema = "{\"const\": \"a\\u0000b\"}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_EJSON);
    cr_assert(strstr(pl_errmsg(), "input_schema: the string at '/const' "
                                  "holds \\u0000"),
              "%s", pl_errmsg());
    d.input_schema = "{\"type\": \"object\"}";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);

    cr_assert_eq(pl_registry_add(reg, &d), PL_EEXIST);
    cr_assert(strstr(pl_errmsg(), "'ok'") != NULL, "%s", pl_errmsg());

    d.name = "versioned";
    d.version = 99;
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);
    d.version = PL_POLICY_DEF_VERSION;
    d.in_doubt = (pl_in_doubt)7;
    cr_assert_eq(pl_registry_add(reg, &d), PL_EINVAL);

    cr_assert_eq(pl_registry_add(NULL, &d), PL_EINVAL);
    cr_assert_eq(pl_registry_add(reg, NULL), PL_EINVAL);
    cr_assert_eq(pl_registry_count(reg), 2);
    pl_registry_free(reg);
    pl_registry_free(NULL);
}

Test(registry, copies_strings)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    char name[16] = "temp", desc[16] = "desc";
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.description = desc;
    d.fn = noop;
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    snprintf(name, sizeof name, "%s", "gone");
    snprintf(desc, sizeof desc, "%s", "changed");
    const pl_policy_def *f = pl_registry_find(reg, "temp");
    cr_assert_not_null(f);
    cr_assert_str_eq(f->description, "desc");
    pl_registry_free(reg);
}

Test(registry, status_table)
{
    cr_assert_str_eq(pl_status_name(PL_ENONDET), "PL_ENONDET");
    cr_assert_str_eq(pl_strerror(PL_OK), "success");
    cr_assert_str_eq(pl_strerror(12345), "unknown status");
    cr_assert_str_eq(pl_status_name(-999), "PL_UNKNOWN");
    cr_assert_str_eq(pl_step_type_name(PL_STEP_ACTION_RESULT), "action_result");
    cr_assert_null(pl_step_type_name((pl_step_type)0));
    pl_step_type t;
    cr_assert_eq(pl_step_type_parse(&t, "side_effect"), PL_OK);
    cr_assert_eq(t, PL_STEP_SIDE_EFFECT);
    cr_assert_eq(pl_step_type_parse(&t, "nope"), PL_EINVAL);
    pl_durability du;
    cr_assert_eq(pl_durability_parse(&du, "group"), PL_OK);
    cr_assert_eq(du, PL_DURABILITY_GROUP);
    cr_assert_eq(pl_durability_parse(&du, "fast"), PL_EINVAL);
    cr_assert_str_eq(pl_run_status_name(PL_RUN_SUSPENDED), "suspended");
    cr_assert_str_eq(pl_event_kind_name(PL_EVENT_CALL_SERVED), "call_served");
    cr_assert_str_eq(pl_version(), PL_VERSION_STRING);
}

static int released;
static void release_counter(void *user)
{
    cr_assert_str_eq(user, "data", "release gets the policy's user data");
    released++;
    free(user);
}

Test(registry, owned_data_released_with_the_registry)
{
    pl_registry *reg;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    released = 0;
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "owner";
    d.fn = noop;
    d.user = strdup("data");
    cr_assert_not_null(d.user);
    cr_assert_eq(pl_registry_add_owned(reg, &d, release_counter), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_registry_find(reg, "owner")->user, d.user);

    /* refused: nothing registered, nothing released, the caller owns it */
    pl_policy_def again = d;
    again.user = strdup("data");
    cr_assert_eq(pl_registry_add_owned(reg, &again, release_counter),
                 PL_EEXIST);
    cr_assert_eq(pl_registry_count(reg), 1);
    again.name = "other";
    cr_assert_eq(pl_registry_add_owned(reg, &again, NULL), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "release"), "%s", pl_errmsg());
    cr_assert_null(pl_registry_find(reg, "other"));
    cr_assert_eq(released, 0);
    free(again.user);

    pl_registry_free(reg);
    cr_assert_eq(released, 1, "released once, with the registry");
}
