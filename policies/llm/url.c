/*
 * url.c -- model URLs (policyledger_llm.h, "Model URLs").
 */
#include <stdlib.h>
#include <string.h>

#include "llm.h"

void pl__llm_url_free(pl__llm_url *u)
{
    if (!u)
        return;
    free(u->model);
    free(u->base_url);
    u->model = u->base_url = NULL;
}

static bool has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || *s == 0x7f)
            return true;
    return false;
}

/* "http://host[:port][/path]": a host is required. */
bool pl__llm_base_ok(const char *b)
{
    const char *host = NULL;
    if (strncmp(b, "http://", 7) == 0)
        host = b + 7;
    else if (strncmp(b, "https://", 8) == 0)
        host = b + 8;
    return host && *host && *host != '/' && *host != ':' && !has_ctl(b);
}

static char *trim_slash(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
    return s;
}

int pl__llm_url_parse(pl__llm_url *out, const char *url)
{
    memset(out, 0, sizeof *out);
    if (!url)
        return pl__err(PL_EINVAL, "model URL: NULL");
    const char *sep = strstr(url, "://");
    if (!sep || sep == url)
        return pl__err(PL_EINVAL,
                       "model URL '%.200s': expected SCHEME://..., e.g. "
                       "openai://gpt-4o-mini or scripted://script.json",
                       url);
    size_t slen = (size_t)(sep - url);
    const char *rest = sep + 3;
    if (slen == 8 && memcmp(url, "scripted", 8) == 0) {
        if (!*rest)
            return pl__err(PL_EINVAL, "model URL '%.200s': no script path",
                           url);
        out->provider = PL__LLM_SCRIPTED;
        out->model = pl__strdup(rest);
    } else if (slen == 6 && memcmp(url, "openai", 6) == 0) {
        if (!*rest || has_ctl(rest) || strchr(rest, '/') || strchr(rest, '#'))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected openai://MODEL "
                           "(a model name; a server by base URL is "
                           "openai+http://HOST:PORT/PATH#MODEL)",
                           url);
        out->provider = PL__LLM_OPENAI;
        out->model = pl__strdup(rest);
    } else if ((slen == 11 && memcmp(url, "openai+http", 11) == 0) ||
               (slen == 12 && memcmp(url, "openai+https", 12) == 0)) {
        const char *hash = strrchr(rest, '#');
        if (!hash || !hash[1] || has_ctl(hash + 1))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected "
                           "openai+http://HOST:PORT/PATH#MODEL (no #MODEL)",
                           url);
        out->provider = PL__LLM_OPENAI;
        out->model = pl__strdup(hash + 1);
        out->base_url = pl__asprintf("%.*s://%.*s", (int)(slen - 7), url + 7,
                                     (int)(hash - rest), rest);
        if (out->base_url && !pl__llm_base_ok(out->base_url)) {
            pl__llm_url_free(out);
            return pl__err(PL_EINVAL, "model URL '%.200s': no host", url);
        }
        if (out->base_url)
            trim_slash(out->base_url);
    } else if (slen == 9 && memcmp(url, "anthropic", 9) == 0) {
        if (!*rest || has_ctl(rest) || strchr(rest, '/') || strchr(rest, '#'))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected "
                           "anthropic://MODEL",
                           url);
        out->provider = PL__LLM_ANTHROPIC;
        out->model = pl__strdup(rest);
    } else if (slen == 6 && memcmp(url, "gemini", 6) == 0) {
        if (!*rest || has_ctl(rest) || strchr(rest, '/') || strchr(rest, '#') ||
            strchr(rest, '?') || strchr(rest, ':'))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected "
                           "gemini://MODEL",
                           url);
        out->provider = PL__LLM_GEMINI;
        out->model = pl__strdup(rest);
    } else if (slen == 6 && memcmp(url, "ollama", 6) == 0) {
        const char *slash = strchr(rest, '/');
        if (!slash || slash == rest || *rest == ':' || !slash[1] ||
            has_ctl(rest))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected "
                           "ollama://HOST:PORT/MODEL",
                           url);
        out->provider = PL__LLM_OLLAMA;
        out->model = pl__strdup(slash + 1);
        out->base_url = pl__asprintf("http://%.*s", (int)(slash - rest), rest);
        if (!out->base_url) {
            pl__llm_url_free(out);
            return pl__err(PL_ENOMEM, "out of memory");
        }
    } else {
        return pl__err(PL_EINVAL,
                       "model URL '%.200s': unknown scheme '%.*s' (known: "
                       "openai, openai+http, openai+https, anthropic, "
                       "gemini, ollama, scripted)",
                       url, (int)(slen > 40 ? 40 : slen), url);
    }
    bool by_base = out->provider == PL__LLM_OPENAI && slen > 6;
    if (!out->model || (by_base && !out->base_url)) {
        pl__llm_url_free(out);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    return PL_OK;
}
