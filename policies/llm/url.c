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

/* Whether the authority @p a (@p n bytes: "[user@]host[:port]") has no
 * port, or one of 1 to 65535 in digits; *@p has says which (may be
 * NULL). */
static bool port_ok(const char *a, size_t n, bool *has)
{
    size_t h = 0; /* the host's start: past the last '@' */
    for (size_t i = 0; i < n; i++)
        if (a[i] == '@')
            h = i + 1;
    size_t colon = n;
    if (h < n && a[h] == '[') { /* [IPv6]: a port only after the ']' */
        const char *close = memchr(a + h, ']', n - h);
        if (!close)
            return false;
        size_t c = (size_t)(close - a) + 1;
        if (c < n && a[c] != ':')
            return false;
        colon = c;
    } else {
        for (size_t i = h; i < n; i++)
            if (a[i] == ':')
                colon = i;
    }
    if (has)
        *has = colon < n;
    if (colon >= n)
        return true;
    size_t digits = n - colon - 1;
    if (digits < 1 || digits > 5)
        return false;
    long port = 0;
    for (size_t i = colon + 1; i < n; i++) {
        if (a[i] < '0' || a[i] > '9')
            return false;
        port = port * 10 + (a[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

const char *pl__llm_base_bad(const char *b)
{
    const char *host = NULL;
    if (strncmp(b, "http://", 7) == 0)
        host = b + 7;
    else if (strncmp(b, "https://", 8) == 0)
        host = b + 8;
    if (!host || !*host || *host == '/' || *host == ':' || has_ctl(b))
        return "no host";
    return port_ok(host, strcspn(host, "/?#"), NULL)
               ? NULL
               : "a port that is not 1 to "
                 "65535";
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
        const char *bad = out->base_url ? pl__llm_base_bad(out->base_url)
                                        : NULL;
        if (bad) {
            pl__llm_url_free(out);
            return pl__err(PL_EINVAL, "model URL '%.200s': %s", url, bad);
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
                           "ollama://HOST[:PORT]/MODEL",
                           url);
        bool has_port;
        if (!port_ok(rest, (size_t)(slash - rest), &has_port))
            return pl__err(PL_EINVAL,
                           "model URL '%.200s': expected "
                           "ollama://HOST[:PORT]/MODEL, with a port of 1 to "
                           "65535",
                           url);
        out->provider = PL__LLM_OLLAMA;
        out->model = pl__strdup(slash + 1);
        /* no port: Ollama's own, not HTTP's 80 */
        out->base_url = pl__asprintf("http://%.*s%s", (int)(slash - rest), rest,
                                     has_port ? "" : ":11434");
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
