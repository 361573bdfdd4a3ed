/*
 * test_llm_names.c -- policy names as the tool names each provider takes
 * (policies/llm/names.c): valid names pass as they are, others become
 * valid, distinct and stable, and a tool call maps back to its policy.
 */
#include "support.h"

#include <string.h>

#include "../policies/llm/llm.h"

static const pl__llm_provider g_http[] = {PL__LLM_OPENAI, PL__LLM_ANTHROPIC,
                                          PL__LLM_OLLAMA, PL__LLM_GEMINI};

static void wire(char out[PL__LLM_WIRE_CAP], pl__llm_provider p,
                 const char *name)
{
    cr_assert_eq(pl__llm_wire_name(out, p, name), PL_OK, "%s", pl_errmsg());
    cr_assert(pl__llm_wire_ok(p, out), "provider %d refuses '%s' (from '%s')",
              (int)p, out, name);
}

Test(llm_names, the_rules)
{
    cr_expect(pl__llm_wire_ok(PL__LLM_OPENAI, "get_weather-2"));
    cr_expect(!pl__llm_wire_ok(PL__LLM_OPENAI, "orders.charge"));
    cr_expect(!pl__llm_wire_ok(PL__LLM_ANTHROPIC, "a b"));
    cr_expect(!pl__llm_wire_ok(PL__LLM_OPENAI, ""));
    cr_expect(pl__llm_wire_ok(PL__LLM_GEMINI, "orders.charge"));
    cr_expect(pl__llm_wire_ok(PL__LLM_GEMINI, "_ns:tool-1"));
    cr_expect(!pl__llm_wire_ok(PL__LLM_GEMINI, "1st"));
    cr_expect(!pl__llm_wire_ok(PL__LLM_GEMINI, "-x"));
    cr_expect(pl__llm_wire_ok(PL__LLM_OPENAI, "1st"));
    char n64[65], n65[66];
    memset(n64, 'a', 64);
    n64[64] = '\0';
    memset(n65, 'a', 65);
    n65[65] = '\0';
    cr_expect(pl__llm_wire_ok(PL__LLM_OPENAI, n64));
    cr_expect(!pl__llm_wire_ok(PL__LLM_OPENAI, n65));
    cr_expect(pl__llm_wire_ok(PL__LLM_SCRIPTED, "orders.charge"));
}

Test(llm_names, valid_names_pass_unchanged)
{
    char w[PL__LLM_WIRE_CAP];
    for (size_t i = 0; i < 4; i++) {
        wire(w, g_http[i], "get_weather");
        cr_expect_str_eq(w, "get_weather");
    }
    wire(w, PL__LLM_GEMINI, "orders.charge");
    cr_expect_str_eq(w, "orders.charge");
    cr_assert_eq(pl__llm_wire_name(w, PL__LLM_SCRIPTED, "tools/read_file"),
                 PL_OK);
    cr_expect_str_eq(w, "tools/read_file", "a script names policies");
}

Test(llm_names, others_become_valid_distinct_and_stable)
{
    const char *names[] = {
        "orders.charge",
        "orders_charge",
        "orders/charge",
        "tools/read_file",
        "1st",
        "-dash",
        "caf\xc3\xa9",
        "a b",
        ".",
        "x",
        "a-policy-name-far-longer-than-sixty-four-bytes-that-providers-refuse",
        "a-policy-name-far-longer-than-sixty-four-bytes-that-providers-refusE",
    };
    size_t n = sizeof names / sizeof names[0];
    for (size_t pi = 0; pi < 4; pi++) {
        pl__llm_provider p = g_http[pi];
        char w[16][PL__LLM_WIRE_CAP];
        for (size_t i = 0; i < n; i++) {
            wire(w[i], p, names[i]);
            cr_expect_leq(strlen(w[i]), 64);
            char again[PL__LLM_WIRE_CAP];
            wire(again, p, names[i]);
            cr_expect_str_eq(w[i], again, "the same name, the same wire name");
            if (!pl__llm_wire_ok(p, names[i]))
                cr_expect_str_neq(w[i], names[i]);
        }
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                cr_expect_str_neq(w[i], w[j], "'%s' and '%s' meet for %d",
                                  names[i], names[j], (int)p);
    }
    char w[PL__LLM_WIRE_CAP];
    wire(w, PL__LLM_OPENAI, "orders.charge");
    cr_expect_eq(strncmp(w, "orders_charge_", 14), 0, "readable: %s", w);
    cr_expect_eq(strlen(w), 24);
    wire(w, PL__LLM_GEMINI, "1st");
    cr_expect_eq(w[0], '_', "Gemini: a letter or '_' first: %s", w);
    cr_expect_eq(pl__llm_wire_name(w, PL__LLM_OPENAI, ""), PL_EINVAL);
}

static pl__llm_tool tool(const char *name)
{
    pl__llm_tool t;
    memset(&t, 0, sizeof t);
    t.name = name;
    return t;
}

Test(llm_names, a_set_stays_apart_and_maps_back)
{
    char hashed[PL__LLM_WIRE_CAP];
    wire(hashed, PL__LLM_OPENAI, "orders.charge");
    /* a policy literally named like another's changed name */
    pl__llm_tool t[3] = {tool("orders.charge"), tool(hashed), tool("add")};
    cr_assert_eq(pl__llm_tool_names(t, 3, PL__LLM_OPENAI), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_str_neq(t[0].wire, t[1].wire);
    cr_expect_str_eq(t[2].wire, "add");
    for (int i = 0; i < 3; i++) {
        cr_expect(pl__llm_wire_ok(PL__LLM_OPENAI, t[i].wire));
        cr_expect_eq(pl__llm_tool_by_wire(t, 3, t[i].wire), &t[i]);
    }
    cr_expect_null(pl__llm_tool_by_wire(t, 3, "orders.charge"),
                   "a call by the policy's own name is no tool's");
    cr_expect_null(pl__llm_tool_by_wire(t, 3, NULL));
    char buf[PL__LLM_WIRE_CAP];
    cr_expect_str_eq(pl__llm_wire_of(buf, PL__LLM_OPENAI, t, 3, "add"), "add");
    /* a tool of an earlier turn, no longer offered: computed alone */
    const char *gone = pl__llm_wire_of(buf, PL__LLM_OPENAI, t, 3, "old.tool");
    char want[PL__LLM_WIRE_CAP];
    wire(want, PL__LLM_OPENAI, "old.tool");
    cr_expect_str_eq(gone, want);
    /* the same policy offered twice is not a clash */
    pl__llm_tool d[2] = {tool("a.b"), tool("a.b")};
    cr_expect_eq(pl__llm_tool_names(d, 2, PL__LLM_ANTHROPIC), PL_OK);
    cr_expect_str_eq(d[0].wire, d[1].wire);
}
