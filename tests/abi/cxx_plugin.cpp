/*
 * cxx_plugin.cpp -- a plugin written in C++: its two symbols get C linkage
 * and default visibility from the header's declarations.
 *
 *   cxx_greet  {"name": N} -> {"greeting": "hello, N"}
 */
#include <policyledger.h>

#include <string>

PL_PLUGIN_DECLARE;

namespace {

int greet(pl_ctx *, const pl_action *a, pl_steps *out, void *)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a->payload, "name");
    std::string text = "hello, ";
    text += cJSON_IsString(name) ? name->valuestring : "world";
    cJSON *r = cJSON_CreateObject();
    int st = r && cJSON_AddStringToObject(r, "greeting", text.c_str())
                 ? pl_steps_add_result(out, r)
                 : PL_ENOMEM;
    cJSON_Delete(r);
    return st;
}

} // namespace

int pl_plugin_init(pl_registry *reg)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "cxx_greet";
    d.fn = greet;
    d.description = "Greets by name.";
    return pl_registry_add(reg, &d);
}
