/*
 * llm.c -- LLM policies: registration, the policy itself, token totals.
 *
 * Each turn the policy rebuilds the request from its ledger, makes one
 * recorded exchange (pl_ctx_side_effect(), so it is durable before the
 * answer is used and replayed, never repeated), and returns the answer as
 * steps.  A malformed answer fails the call, or is re-prompted within the
 * same turn, up to the limit (each re-prompt a `text` step with
 * "reprompt": true, sent to the model as the user's message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "registry.h"

#define EXCHANGE "llm_exchange"

static void llm_free(void *p)
{
    pl__llm *m = p;
    if (!m)
        return;
    free(m->name);
    pl__llm_url_free(&m->url);
    free(m->system_prompt);
    cJSON_Delete(m->output_schema);
    pl_schema_free(m->output_check);
    free(m->api_key_env);
    pl__llm_conn_free(m->conn);
    free(m);
}

static void free_tools(pl__llm_tool *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        cJSON_Delete(t[i].parameters);
        pl_schema_free(t[i].check);
    }
    free(t);
}

/* The offered tools, from the registry's metadata, and "submit", each with
 * the name its provider sees. */
static int make_tools(pl__llm_tool **out, size_t *n, pl_ctx *ctx,
                      const pl__llm *m, const pl_action *a)
{
    *out = NULL;
    *n = 0;
    if (!a->n_actions)
        return PL_OK;
    bool submit = pl__llm_has_submit(m, a);
    pl__llm_tool *t = calloc(a->n_actions + submit, sizeof *t);
    if (!t)
        return pl__err(PL_ENOMEM, "out of memory");
    const pl_registry *reg = pl_engine_registry(pl_ctx_engine(ctx));
    for (size_t i = 0; i < a->n_actions; i++) {
        const pl_policy_def *d = pl_registry_find(reg, a->actions[i]);
        t[i].name = a->actions[i];
        t[i].description = d ? d->description : NULL;
        cJSON *schema = d && d->input_schema ? cJSON_Parse(d->input_schema)
                                             : NULL;
        if (!cJSON_IsObject(schema)) {
            cJSON_Delete(schema);
            schema = NULL;
            pl_json_pack(&schema, "{s:s}", "type", "object");
        }
        t[i].parameters = schema;
        if (!schema) {
            free_tools(t, i);
            return pl__err(PL_ENOMEM, "out of memory");
        }
        /* the registry refused bad schemas: one that does not compile
         * here is left unchecked rather than failing the turn */
        if (pl_schema_compile(&t[i].check, schema))
            t[i].check = NULL;
    }
    size_t k = a->n_actions;
    if (submit) {
        t[k].name = PL__LLM_SUBMIT;
        t[k].description = "Submit the final answer; its arguments are the "
                           "answer.";
        t[k].parameters = cJSON_Duplicate(m->output_schema, 1);
        if (!t[k++].parameters) {
            free_tools(t, k);
            return pl__err(PL_ENOMEM, "out of memory");
        }
    }
    int st = pl__llm_tool_names(t, k, m->url.provider);
    if (st) {
        free_tools(t, k);
        return st;
    }
    *out = t;
    *n = k;
    return PL_OK;
}

/* The recorded exchange's value, if @p s is one. */
static const cJSON *exchange_of(const pl_step *s)
{
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
        return NULL;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, EXCHANGE) != 0)
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(p, "value");
}

typedef struct exchange_args {
    const pl__llm *m;
    const char *body;
    long script_pos;
} exchange_args;

static int do_exchange(cJSON **out, void *user)
{
    exchange_args *x = user;
    return pl__llm_exchange(out, x->m, x->body, x->script_pos);
}

/* The tool catalog, for a re-prompt. */
static char *catalog(const pl__llm_tool *tools, size_t n)
{
    pl__buf b = {0};
    int st = PL_OK;
    if (!n)
        st = pl__buf_append(&b, " (none: answer with text)", 25);
    for (size_t i = 0; !st && i < n; i++) {
        char *schema = cJSON_PrintUnformatted(tools[i].parameters);
        char *line = pl__asprintf("\n- %s%s%s, arguments: %s", tools[i].wire,
                                  tools[i].description ? ": " : "",
                                  tools[i].description ? tools[i].description
                                                       : "",
                                  schema ? schema : "{}");
        st = line ? pl__buf_append(&b, line, strlen(line)) : PL_ENOMEM;
        free(line);
        free(schema);
    }
    if (!st)
        st = pl__buf_append(&b, "", 1);
    if (st) {
        pl__buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* One model call, as a recorded exchange; *value is borrowed-free owned. */
static int one_exchange(cJSON **value, pl_ctx *ctx, const pl__llm *m,
                        const pl_action *a, const pl__llm_tool *tools,
                        size_t n_tools, unsigned *n_exchanges)
{
    const pl_steps *ledger = NULL;
    int st = pl_ctx_ledger(&ledger, ctx);
    if (st)
        return st;
    long pos = 0;
    *n_exchanges = 0;
    for (size_t i = 0; i < pl_steps_count(ledger); i++) {
        const cJSON *x = exchange_of(pl_steps_at(ledger, i));
        if (!x)
            continue;
        (*n_exchanges)++;
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(x, "script_next");
        if (cJSON_IsNumber(next) && next->valuedouble >= 0 &&
            next->valuedouble < 1e9)
            pos = (long)next->valuedouble;
    }
    cJSON *msgs = NULL;
    char *body = NULL;
    if ((st = pl__llm_messages(&msgs, m, a, ledger)))
        return st;
    st = pl__llm_request_body(&body, m, msgs, tools, n_tools);
    cJSON_Delete(msgs);
    if (st)
        return st;
    exchange_args x = {m, body, pos};
    st = pl_ctx_side_effect(value, ctx, EXCHANGE, do_exchange, &x);
    free(body);
    return st;
}

/* The first error result of the last turn's tool calls, if any: the
 * action_result steps after the last exchange. */
static int last_turn_error(const pl_step **out, pl_ctx *ctx)
{
    *out = NULL;
    const pl_steps *ledger = NULL;
    int st = pl_ctx_ledger(&ledger, ctx);
    if (st)
        return st;
    size_t i = pl_steps_count(ledger);
    while (i > 0 && !exchange_of(pl_steps_at(ledger, i - 1)))
        i--;
    for (; i < pl_steps_count(ledger); i++) {
        const pl_step *s = pl_steps_at(ledger, i);
        if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT &&
            pl_step_is_error(s)) {
            *out = s;
            break;
        }
    }
    return PL_OK;
}

static int llm_policy(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    const pl__llm *m = user;
    if (m->o.tool_errors == PL_LLM_TOOL_ERRORS_FAIL) {
        const pl_step *failed = NULL;
        int st = last_turn_error(&failed, ctx);
        if (st || failed)
            return st ? st : pl_steps_add_result(out, pl_step_payload(failed));
    }
    pl__llm_tool *tools = NULL;
    size_t n_tools = 0;
    int st = make_tools(&tools, &n_tools, ctx, m, a);
    for (unsigned attempt = 0; !st; attempt++) {
        cJSON *v = NULL;
        unsigned n = 0;
        if ((st = one_exchange(&v, ctx, m, a, tools, n_tools, &n)))
            break;
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(v, "error");
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(v, "answer");
        if (err) {
            const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
            st = pl_steps_add_error(out,
                                    cJSON_IsString(code) ? code->valuestring
                                                         : "ModelError",
                                    cJSON_IsString(msg) ? msg->valuestring
                                                        : "model call failed");
            cJSON_Delete(v);
            break;
        }
        char *why = NULL;
        st = ans ? pl__llm_answer_steps(out, &why, m, ans, a, tools, n_tools, n)
                 : (why = pl__strdup("the recorded exchange has no answer"),
                    PL_EJSON);
        cJSON_Delete(v);
        if (st != PL_EJSON || !why) {
            free(why);
            break;
        }
        bool again = m->o.malformed == PL_LLM_MALFORMED_REPROMPT &&
                     attempt < m->o.reprompt_limit;
        if (!again) {
            char *msg = pl__asprintf("the model's answer cannot become steps: "
                                     "%s",
                                     why);
            st = msg ? pl_steps_add_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION,
                                          msg)
                     : PL_ENOMEM;
            free(msg);
            free(why);
            break;
        }
        char *cat = catalog(tools, n_tools);
        char *text = cat ? pl__asprintf("Your last answer could not be used: "
                                        "%s. Answer again, with text or with "
                                        "calls of these tools, arguments a "
                                        "JSON object:%s",
                                        why, cat)
                         : NULL;
        cJSON *p = NULL;
        st = text ? pl_json_pack(&p, "{s:s, s:b}", "text", text, "reprompt", 1)
                  : PL_ENOMEM;
        if (!st)
            st = pl_ctx_emit(ctx, out, PL_STEP_TEXT, NULL, p);
        cJSON_Delete(p);
        free(text);
        free(cat);
        free(why);
    }
    free_tools(tools, n_tools);
    return st;
}

int pl_llm_register(pl_registry *reg, const char *name, const char *model_url,
                    const char *system_prompt, const pl_llm_options *opts)
{
    if (!reg || !name || !model_url)
        return pl__err(PL_EINVAL, "pl_llm_register: reg, name and model_url "
                                  "are required");
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    if (opts) {
        if (opts->version != PL_LLM_OPTIONS_VERSION)
            return pl__err(PL_EINVAL,
                           "pl_llm_register: options version %u, expected %u "
                           "(start from PL_LLM_OPTIONS_INIT)",
                           opts->version, PL_LLM_OPTIONS_VERSION);
        o = *opts;
    }
    if (o.tool_errors != PL_LLM_TOOL_ERRORS_CONTINUE &&
        o.tool_errors != PL_LLM_TOOL_ERRORS_FAIL)
        return pl__err(PL_EINVAL,
                       "pl_llm_register: unknown tool-error rule "
                       "%d",
                       (int)o.tool_errors);
    if (o.malformed != PL_LLM_MALFORMED_FAIL &&
        o.malformed != PL_LLM_MALFORMED_REPROMPT)
        return pl__err(PL_EINVAL,
                       "pl_llm_register: unknown malformed-output "
                       "rule %d",
                       (int)o.malformed);
    if (o.temperature != o.temperature || o.temperature > 2.0)
        return pl__err(PL_EINVAL, "pl_llm_register: temperature must be at "
                                  "most 2 (negative: the provider's default)");
    pl__llm *m = calloc(1, sizeof *m);
    if (!m)
        return pl__err(PL_ENOMEM, "out of memory");
    int st = pl__llm_url_parse(&m->url, model_url);
    if (st) {
        free(m);
        return st;
    }
    m->o = o;
    m->conn = pl__llm_conn_new();
    m->name = pl__strdup(name);
    m->system_prompt = system_prompt ? pl__strdup(system_prompt) : NULL;
    m->api_key_env = o.api_key_env ? pl__strdup(o.api_key_env) : NULL;
    char *base = o.base_url ? pl__strdup(o.base_url) : NULL;
    m->o.base_url = base;
    m->o.api_key_env = NULL;
    m->o.output_schema = NULL;
    m->o.description = NULL;
    if (!m->conn || !m->name || (system_prompt && !m->system_prompt) ||
        (o.api_key_env && !m->api_key_env) || (o.base_url && !base)) {
        free(base);
        llm_free(m);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    if (base && strncmp(base, "http://", 7) != 0 &&
        strncmp(base, "https://", 8) != 0) {
        free(base);
        llm_free(m);
        return pl__err(PL_EINVAL,
                       "pl_llm_register: base_url '%.200s' is not an http:// "
                       "or https:// URL",
                       o.base_url);
    }
    if (o.output_schema) {
        m->output_schema = cJSON_Parse(o.output_schema);
        if (!cJSON_IsObject(m->output_schema)) {
            free(base);
            llm_free(m);
            return pl__err(PL_EINVAL, "pl_llm_register: output_schema is not "
                                      "a JSON object");
        }
        if ((st = pl_schema_compile(&m->output_check, m->output_schema))) {
            char why[200];
            snprintf(why, sizeof why, "%s", pl_errmsg());
            free(base);
            llm_free(m);
            return pl__err(st == PL_ENOMEM ? st : PL_EINVAL,
                           "pl_llm_register: output_schema: %s", why);
        }
    }
    size_t before = pl_registry_count(reg);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = llm_policy;
    d.user = m;
    d.description = o.description;
    if ((st = pl_registry_add(reg, &d))) {
        free(base);
        llm_free(m);
        return st;
    }
    if ((st = pl__registry_own(reg, base, free))) {
        pl__registry_truncate(reg, before);
        free(base);
        llm_free(m);
        return st;
    }
    if ((st = pl__registry_own(reg, m, llm_free))) {
        pl__registry_truncate(reg, before);
        llm_free(m);
        return st;
    }
    return PL_OK;
}

static int count_tokens(const pl_step *s, void *user)
{
    pl_llm_tokens *t = user;
    const cJSON *x = exchange_of(s);
    if (!x)
        return 0;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(x, "usage");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(u, "input");
    const cJSON *outp = cJSON_GetObjectItemCaseSensitive(u, "output");
    t->exchanges++;
    if (cJSON_IsNumber(in) && in->valuedouble > 0)
        t->input += (uint64_t)in->valuedouble;
    if (cJSON_IsNumber(outp) && outp->valuedouble > 0)
        t->output += (uint64_t)outp->valuedouble;
    return 0;
}

int pl_llm_run_tokens(pl_llm_tokens *out, pl_engine *engine, const char *run_id)
{
    if (!out || !engine || !run_id)
        return pl__err(PL_EINVAL, "pl_llm_run_tokens: NULL argument");
    memset(out, 0, sizeof *out);
    pl_llm_tokens t = {0, 0, 0};
    int st = pl_run_walk(engine, run_id, count_tokens, &t);
    if (!st)
        *out = t;
    return st;
}
