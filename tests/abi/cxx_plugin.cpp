/*
 * cxx_plugin.cpp -- a plugin written in C++: its two symbols get C linkage
 * and default visibility from the header's declarations.
 *
 *   cxx_greet  {"name": N} -> {"greeting": "hello, N"}
 *   cxx_catch  throws, catches its exception and fails with PL_EPOLICY,
 *              as a C++ policy must
 *   cxx_throw  lets its exception leave the policy (which the guide says
 *              ends the process, the run left as a crash leaves it)
 */
#include <policyledger.h>

#include <stdexcept>
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

void charge_card() { throw std::runtime_error("card declined"); }

int catches(pl_ctx *, const pl_action *, pl_steps *, void *)
{
    try {
        charge_card();
        return PL_OK;
    } catch (const std::exception &) {
        return PL_EPOLICY;
    }
}

int throws(pl_ctx *, const pl_action *, pl_steps *, void *)
{
    charge_card();
    return PL_OK;
}

} // namespace

int pl_plugin_init(pl_registry *reg)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "cxx_greet";
    d.fn = greet;
    d.description = "Greets by name.";
    int st = pl_registry_add(reg, &d);
    if (!st)
        st = pl_registry_add_fn(reg, "cxx_catch", catches, nullptr);
    if (!st)
        st = pl_registry_add_fn(reg, "cxx_throw", throws, nullptr);
    return st;
}
