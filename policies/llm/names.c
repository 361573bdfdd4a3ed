/*
 * names.c -- policy names as the tool names a provider accepts.
 *
 * A registered policy name is 1..PL_MAX_NAME bytes of anything but control
 * characters ("orders.charge", "tools/read_file"); providers take far less:
 *
 *   provider            first byte        other bytes         length
 *   OpenAI, Anthropic,  [a-zA-Z0-9_-]     [a-zA-Z0-9_-]       1..64
 *   Ollama (OpenAI's)
 *   Gemini              [a-zA-Z_]         [a-zA-Z0-9_.:-]     1..64
 *   scripted            the policy name itself (a script names policies)
 *
 * (Gemini's FunctionDeclaration.name, as the google-genai reference gives
 * it; older references allowed only [a-zA-Z0-9_-], which this rule's output
 * for OpenAI would also satisfy, so a name Gemini refuses is narrowed the
 * same way.)
 *
 * The wire name of a policy:
 *   - the name itself when the provider accepts it;
 *   - else every refused byte becomes '_', a leading byte Gemini refuses
 *     gets a '_' before it, the result is cut to 53 bytes, and "_" plus the
 *     first 10 hex digits of SHA-256(name) is appended (64 bytes at most).
 * It depends on the name alone, so the same ledger always gives the same
 * request, and a tool call in a recorded answer maps back the same way on
 * replay.  A changed name always carries the hash of the original, so two
 * changed names meet only if their hashes do (40 bits).  Within one turn's
 * tool set the names must stay apart: if a wire name equals another tool's
 * (a policy literally named like another's changed name), both take the
 * hashed form; if they still meet, the turn fails with a clear error.
 */
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "llm.h"

#define HASH_HEX 10
#define KEEP (PL__LLM_WIRE_MAX - 1 - HASH_HEX) /* bytes of the name kept */

static bool alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
}

static bool byte_ok(pl__llm_provider p, unsigned char c, bool first)
{
    if (p == PL__LLM_GEMINI) {
        if (first)
            return (alnum(c) && !(c >= '0' && c <= '9')) || c == '_';
        return alnum(c) || c == '_' || c == '.' || c == ':' || c == '-';
    }
    return alnum(c) || c == '_' || c == '-';
}

bool pl__llm_wire_ok(pl__llm_provider p, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (p == PL__LLM_SCRIPTED)
        return n > 0 && n < PL__LLM_WIRE_CAP;
    if (n == 0 || n > PL__LLM_WIRE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!byte_ok(p, (unsigned char)name[i], i == 0))
            return false;
    return true;
}

/* The hashed form: the name narrowed to the provider's bytes, cut, and
 * the hash of the whole name after it. */
static int hashed(char out[PL__LLM_WIRE_CAP], pl__llm_provider p,
                  const char *name)
{
    uint8_t md[PL_HASH_LEN];
    if (pl__sha256(name, strlen(name), md))
        return pl__err(PL_ENOMEM, "cannot hash the tool name '%.100s'", name);
    size_t k = 0;
    if (!byte_ok(p, (unsigned char)name[0], true) &&
        byte_ok(p, (unsigned char)name[0], false))
        out[k++] = '_'; /* Gemini: a digit, '.', ':' or '-' cannot lead */
    for (size_t i = 0; name[i] && k < KEEP; i++)
        out[k++] = byte_ok(p, (unsigned char)name[i], false) ? name[i] : '_';
    char hex[2 * PL_HASH_LEN + 1];
    pl__hex(hex, md, sizeof md);
    snprintf(out + k, PL__LLM_WIRE_CAP - k, "_%.*s", HASH_HEX, hex);
    return PL_OK;
}

int pl__llm_wire_name(char out[PL__LLM_WIRE_CAP], pl__llm_provider p,
                      const char *name)
{
    out[0] = '\0';
    if (!name || !*name)
        return pl__err(PL_EINVAL, "a tool has an empty name");
    if (pl__llm_wire_ok(p, name)) {
        snprintf(out, PL__LLM_WIRE_CAP, "%s", name);
        return PL_OK;
    }
    return hashed(out, p, name);
}

int pl__llm_tool_names(pl__llm_tool *tools, size_t n, pl__llm_provider p)
{
    int st = PL_OK;
    for (size_t i = 0; !st && i < n; i++)
        st = pl__llm_wire_name(tools[i].wire, p, tools[i].name);
    for (size_t i = 0; !st && i < n; i++)
        for (size_t j = i + 1; !st && j < n; j++) {
            if (strcmp(tools[i].wire, tools[j].wire) != 0)
                continue;
            if (strcmp(tools[i].name, tools[j].name) == 0)
                continue; /* the same policy offered twice */
            /* one is a name the provider took as it is: hash both */
            if ((st = hashed(tools[i].wire, p, tools[i].name)) ||
                (st = hashed(tools[j].wire, p, tools[j].name)))
                break;
        }
    for (size_t i = 0; !st && i < n; i++)
        for (size_t j = i + 1; !st && j < n; j++)
            if (strcmp(tools[i].wire, tools[j].wire) == 0 &&
                strcmp(tools[i].name, tools[j].name) != 0)
                st = pl__err(PL_EINVAL,
                             "the tools '%.100s' and '%.100s' have the same "
                             "name for the model's provider, '%s'; rename one",
                             tools[i].name, tools[j].name, tools[i].wire);
    return st;
}

const char *pl__llm_wire_of(char buf[PL__LLM_WIRE_CAP], pl__llm_provider p,
                            const pl__llm_tool *tools, size_t n,
                            const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(tools[i].name, name) == 0)
            return tools[i].wire;
    /* a tool of an earlier turn that is not offered now */
    return pl__llm_wire_name(buf, p, name) ? name : buf;
}

const pl__llm_tool *pl__llm_tool_by_wire(const pl__llm_tool *tools, size_t n,
                                         const char *wire)
{
    for (size_t i = 0; wire && i < n; i++)
        if (strcmp(tools[i].wire, wire) == 0)
            return &tools[i];
    return NULL;
}
