/*
 * decorator_observe.c -- observe: a tool's raw result as the observation a
 * model is shown, both recorded.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be; only the reading of its options' version is
 * the library's own (util.h).
 *
 * For a call it observes, the decorator runs the rest of the chain (whose
 * result, the raw one, is recorded where the chain put it), asks the
 * normaliser for the observation (the built-in one below, or the user's;
 * either may call policies, each call recorded), and records
 *
 *   action_result by "observe"   {"observation": {...}, "raw": {...}}
 *
 * as the call's result.  Error results pass unchanged: they are what the
 * model should read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

#include "ext.h"
#include "schema.h"

#define FACT_MAX 200          /* bytes of one key fact's text */
#define FACTS_MAX 24          /* key facts at most */
#define MANY_ITEMS 20         /* an array this long suggests refining */
#define SUMMARIZE_OVER 2048   /* default: raw JSON longer is summarised */
#define SUMMARIZER_IN (32768) /* raw JSON bytes a summariser is given */

static const char *check_options(const pl_observe_options *o)
{
    if (o->n_tools && !o->tools)
        return "n_tools without tools";
    for (size_t i = 0; i < o->n_tools; i++)
        if (!o->tools[i] || !o->tools[i][0])
            return "a tool name is NULL or empty";
    if (o->summarizer && !o->summarizer[0])
        return "the summarizer's name is empty";
    return NULL;
}

/* Read @p in (NULL: the defaults) into @p o, at the current version, and
 * check it: PL_OK, or PL_EINVAL with a message that starts with @p fn. */
static int read_options(pl_observe_options *o, const pl_observe_options *in,
                        const char *fn)
{
    PL__EXT_ONE_VERSION(PL_OBSERVE_OPTIONS);
    const pl_observe_options def = PL_OBSERVE_OPTIONS_INIT;
    if (in && PL__EXT_VERSION_OK(in->version, pl_observe_options,
                                 PL_OBSERVE_OPTIONS, fn))
        return PL_EINVAL;
    *o = in ? *in : def;
    const char *bad = check_options(o);
    return bad ? pl_errorf(PL_EINVAL, "%s: %s", fn, bad) : PL_OK;
}

static bool observes(const pl_observe_options *o, const char *policy)
{
    if (!o->tools)
        return true;
    for (size_t i = 0; i < o->n_tools; i++)
        if (strcmp(o->tools[i], policy) == 0)
            return true;
    return false;
}

/* Cut @p s to at most @p max bytes on a UTF-8 boundary, "..." after a cut.
 * Writes into @p buf (max + 4 bytes). */
static const char *cut(char *buf, const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return s;
    while (n > 0 && (n > max || ((unsigned char)s[n] & 0xc0) == 0x80))
        n--;
    memcpy(buf, s, n);
    memcpy(buf + n, "...", 4);
    return buf;
}

/* One key fact's text for @p v into @p buf (FACT_MAX + 4 bytes). */
static const char *fact_text(char *buf, const cJSON *v)
{
    if (cJSON_IsString(v))
        return cut(buf, v->valuestring, FACT_MAX);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        snprintf(buf, FACT_MAX, "%d item%s", n, n == 1 ? "" : "s");
        return buf;
    }
    if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v);
        snprintf(buf, FACT_MAX, "%d field%s", n, n == 1 ? "" : "s");
        return buf;
    }
    char *t = cJSON_PrintUnformatted(v); /* a number */
    if (!t)
        return NULL;
    snprintf(buf, FACT_MAX, "%s", t);
    free(t);
    return buf;
}

/* The summary sentence of the built-in observation. */
static int summary(char **out, const char *tool, const cJSON *raw)
{
    size_t cap = 1024, len = 0;
    char *s = malloc(cap);
    if (!s)
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    int n = cJSON_GetArraySize(raw);
    /* names quoted cut short end on a character's boundary (the
     * observation is text a model's provider reads as UTF-8) */
    len += (size_t)snprintf(s, cap, "'%.*s' returned %d field%s",
                            pl__utf8_cut(tool, 100), tool, n,
                            n == 1 ? "" : "s");
    const cJSON *m;
    int listed = 0;
    cJSON_ArrayForEach(m, raw)
    {
        if (listed == 8 || len + 64 >= cap) {
            len += (size_t)snprintf(s + len, cap - len, ", ...");
            break;
        }
        len += (size_t)snprintf(s + len, cap - len, "%s%.*s",
                                listed ? ", " : ": ",
                                pl__utf8_cut(m->string, 40), m->string);
        listed++;
    }
    const cJSON *pg = cJSON_GetObjectItemCaseSensitive(raw, "pagination");
    const cJSON *pages = cJSON_GetObjectItemCaseSensitive(pg, "pages");
    const cJSON *stopped = cJSON_GetObjectItemCaseSensitive(pg, "stopped");
    if (cJSON_IsNumber(pages) && cJSON_IsString(stopped))
        len += (size_t)snprintf(
            s + len, cap - len, "; %d page%s read, %s%.*s", pages->valueint,
            pages->valueint == 1 ? "" : "s",
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pg, "complete"))
                ? "complete"
                : "incomplete: stopped by ",
            pl__utf8_cut(stopped->valuestring, 40),
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pg, "complete"))
                ? ""
                : stopped->valuestring);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(raw, "truncated")))
        snprintf(s + len, cap - len, "; the content was truncated");
    *out = s;
    return PL_OK;
}

int pl_observation_default(cJSON **out, const char *tool, const cJSON *raw)
{
    if (out)
        *out = NULL;
    if (!out || !tool || !cJSON_IsObject(raw))
        return pl_errorf(PL_EINVAL, "pl_observation_default: %s",
                         !out    ? "NULL out"
                         : !tool ? "NULL tool"
                                 : "the raw result is not an object");
    char *sum = NULL;
    int st = summary(&sum, tool, raw);
    if (st)
        return st;
    cJSON *o = cJSON_CreateObject();
    cJSON *facts = NULL, *aff = NULL;
    bool ok = o && cJSON_AddStringToObject(o, "summary", sum) &&
              (facts = cJSON_AddObjectToObject(o, "key_facts")) &&
              (aff = cJSON_AddArrayToObject(o, "affordances"));
    free(sum);
    const cJSON *m;
    int n = 0;
    bool many = false;
    char buf[FACT_MAX + 4];
    cJSON_ArrayForEach(m, raw)
    {
        if (!ok)
            break;
        if (cJSON_IsArray(m) && cJSON_GetArraySize(m) >= MANY_ITEMS)
            many = true;
        if (strcmp(m->string, "pagination") == 0 || n == FACTS_MAX)
            continue;
        const char *t = fact_text(buf, m);
        ok = t && cJSON_AddStringToObject(facts, m->string, t);
        n++;
    }
    const cJSON *pg = cJSON_GetObjectItemCaseSensitive(raw, "pagination");
    if (ok && cJSON_GetObjectItemCaseSensitive(pg, "next"))
        ok = cJSON_AddItemToArray(aff, cJSON_CreateString("next_page"));
    if (ok && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(raw, "truncated")))
        ok = cJSON_AddItemToArray(aff, cJSON_CreateString("read_more"));
    if (ok && many)
        ok = cJSON_AddItemToArray(aff, cJSON_CreateString("refine_query"));
    if (!ok) {
        cJSON_Delete(o);
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    }
    *out = o;
    return PL_OK;
}

/* Ask the summariser for a summary of @p raw; *out its text (a copy) or
 * NULL when its result has none (an error result, say). */
static int ask_summarizer(char **out, pl_ctx *ctx, const char *summarizer,
                          const char *tool, const char *raw_text)
{
    *out = NULL;
    size_t n = strlen(raw_text);
    bool cut_it = n > SUMMARIZER_IN;
    if (cut_it) /* back to a character's start */
        for (n = SUMMARIZER_IN;
             n > 0 && ((unsigned char)raw_text[n] & 0xc0) == 0x80; n--)
            ;
    size_t len = n + 256;
    char *prompt = malloc(len);
    if (!prompt)
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    snprintf(prompt, len,
             "Summarise in one sentence what the tool '%.100s' returned, "
             "for an agent deciding its next step. The result, as JSON%s:\n"
             "%.*s",
             tool, cut_it ? " (cut)" : "", (int)n, raw_text);
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{s:s}", "text", prompt);
    free(prompt);
    if (st)
        return st;
    pl_action a = PL_ACTION_INIT;
    a.policy = summarizer;
    a.payload = p;
    pl_step *res = NULL;
    st = pl_ctx_call(&res, ctx, &a, NULL, 0);
    cJSON_Delete(p);
    if (st == PL_ERESULT) /* no summary: the observation goes without */
        st = PL_OK;
    if (st) {
        pl_step_free(res);
        return st;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(pl_step_payload(res),
                                                      "text");
    if (!pl_step_is_error(res) && cJSON_IsString(t) && t->valuestring[0] &&
        !(*out = strdup(t->valuestring)))
        st = pl_errorf(PL_ENOMEM, "observe: out of memory");
    pl_step_free(res);
    return st;
}

/* The built-in normaliser, with the summariser of the options. */
static int builtin(cJSON **out, pl_ctx *ctx, const pl_action *action,
                   const cJSON *raw, const pl_observe_options *o)
{
    int st = pl_observation_default(out, action->policy, raw);
    if (st || !o->summarizer)
        return st;
    char *text = cJSON_PrintUnformatted(raw);
    if (!text)
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    size_t over = o->summarize_over ? o->summarize_over : SUMMARIZE_OVER;
    char *sum = NULL;
    if (strlen(text) > over)
        st = ask_summarizer(&sum, ctx, o->summarizer, action->policy, text);
    free(text);
    if (!st && sum) {
        cJSON *s = cJSON_CreateString(sum);
        if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(*out, "summary", s)) {
            cJSON_Delete(s);
            st = pl_errorf(PL_ENOMEM, "observe: out of memory");
        }
    }
    free(sum);
    return st;
}

static int observe_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                      const pl_decorator *self, pl_next *next)
{
    pl_observe_options current;
    if (read_options(&current, self->user, "observe"))
        return PL_EINVAL;
    const pl_observe_options *o = &current;
    if (!observes(o, action->policy))
        return pl_next_call(next, ctx, action, out);
    size_t before = pl_steps_count(out);
    int st = pl_next_call(next, ctx, action, out);
    size_t n = pl_steps_count(out);
    if (st || n == before)
        return st;
    const pl_step *last = pl_steps_at(out, n - 1);
    if (pl_step_is_error(last))
        return PL_OK;
    const cJSON *raw = pl_step_payload(last);
    if (!raw)
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    cJSON *obs = NULL;
    st = o->fn ? o->fn(&obs, ctx, action, raw, o->user)
               : builtin(&obs, ctx, action, raw, o);
    if (st) {
        cJSON_Delete(obs);
        return st;
    }
    if (!cJSON_IsObject(obs)) {
        cJSON_Delete(obs);
        return pl_errorf(PL_EJSON,
                         "observe: the normaliser of '%s' made no JSON "
                         "object",
                         action->policy);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON *rawc = cJSON_Duplicate(raw, true);
    if (!r || !rawc || !cJSON_AddItemToObject(r, "observation", obs)) {
        cJSON_Delete(r);
        cJSON_Delete(rawc);
        cJSON_Delete(obs);
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    }
    if (!cJSON_AddItemToObject(r, "raw", rawc)) {
        cJSON_Delete(r);
        cJSON_Delete(rawc);
        return pl_errorf(PL_ENOMEM, "observe: out of memory");
    }
    st = pl_ctx_emit(ctx, out, PL_STEP_ACTION_RESULT, "observe", r);
    cJSON_Delete(r);
    return st;
}

int pl_decorator_observe(pl_decorator *out, const pl_observe_options *opts)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_observe: out is NULL");
    pl_observe_options current;
    if (read_options(&current, opts, "pl_decorator_observe"))
        return PL_EINVAL;
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = observe_fn;
    d.name = "observe";
    d.user = (void *)opts;
    *out = d;
    return PL_OK;
}
