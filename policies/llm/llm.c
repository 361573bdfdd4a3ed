/*
 * llm.c -- LLM policies: registration, the policy itself, token totals.
 *
 * Each turn the policy builds the request from its ledger (on what it kept
 * of the earlier turns, reqcache.c), makes one recorded exchange
 * (pl_ctx_side_effect_checked(), so it is durable before the answer is
 * used, and replayed, never repeated, for the same request only), and
 * returns the answer as steps.  A malformed answer fails the call, or is
 * re-prompted, up to the limit: the turn ends with a `text` step
 * {"text", "reprompt": true, "again": true}, sent to the model as the
 * user's message in the next turn, so each re-prompt is a turn of the
 * loop.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "platform.h"

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
    free((char *)m->o.base_url); /* the policy's copy */
    pl__llm_conn_free(m->conn);
    pl__llm_reqcache_free(m->cache);
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
    bool submit = pl__llm_has_submit(m, a);
    if (!a->n_actions && !submit)
        return PL_OK;
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
        t[k].submit = true;
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

const cJSON *pl__llm_exchange_of(const pl_step *s)
{
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
        return NULL;
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    if (!cJSON_IsString(name) ||
        strcmp(name->valuestring, PL__LLM_EXCHANGE) != 0)
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(p, "value");
}

/* Token counts and their sums are held to 10^15 (the bound on what a
 * response may report, response.c): ledger bytes come from outside. */
#define MAX_COUNT ((uint64_t)1000000000000000)

/* A token count read from the ledger: what is not a positive number
 * counts 0. */
static uint64_t count_of(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return 0;
    return v->valuedouble < 1e15 ? (uint64_t)v->valuedouble : MAX_COUNT;
}

static void add_count(uint64_t *sum, uint64_t n)
{
    *sum = *sum + n < MAX_COUNT ? *sum + n : MAX_COUNT; /* both <= 10^15 */
}

/* A recorded exchange's token usage, {"usage": {"input", "output"}}. */
static void exchange_usage(const cJSON *x, uint64_t *in, uint64_t *out)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(x, "usage");
    *in = count_of(cJSON_GetObjectItemCaseSensitive(u, "input"));
    *out = count_of(cJSON_GetObjectItemCaseSensitive(u, "output"));
}

/*
 * The invocation's input and output tokens before this turn's exchange:
 * the last own step that carries totals plus the exchanges after it, so a
 * turn reads back only to the turn before.  Read before the exchange, so
 * that the ledger this reads does not hold its answer a second time.
 */
static int tokens_before(uint64_t *in, uint64_t *out, pl_ctx *ctx,
                         const pl__llm *m)
{
    *in = *out = 0;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    uint64_t a, b;
    for (size_t i = pl_steps_count(l); i > 0; i--) {
        const pl_step *s = pl_steps_at(l, i - 1);
        const cJSON *e = pl__llm_exchange_of(s);
        if (e) {
            exchange_usage(e, &a, &b);
            add_count(in, a);
            add_count(out, b);
            continue;
        }
        /* a tool's result may be another model's answer: not ours */
        if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT ||
            strcmp(pl_step_actor(s), m->name) != 0)
            continue;
        const cJSON *p = pl_step_payload(s);
        const cJSON *ti = cJSON_GetObjectItemCaseSensitive(p, "tokens_in");
        const cJSON *to = cJSON_GetObjectItemCaseSensitive(p, "tokens_out");
        if (cJSON_IsNumber(ti) && cJSON_IsNumber(to)) {
            add_count(in, count_of(ti));
            add_count(out, count_of(to));
            break;
        }
    }
    return PL_OK;
}

/*
 * The token fields for the step that ends this turn, into *tok (caller
 * frees): {"tokens": this exchange's input + output, "tokens_in",
 * "tokens_out": the invocation's input and output tokens so far (@p in and
 * @p out before it, tokens_before()), this exchange included}.  *tok stays
 * NULL for an exchange recorded before turns carried tokens (its value has
 * no top-level "tokens"): a ledger recorded then replays to the same steps.
 */
static int turn_tokens(cJSON **tok, uint64_t in, uint64_t out, const cJSON *x)
{
    *tok = NULL;
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(x, "tokens")))
        return PL_OK;
    uint64_t xin, xout;
    exchange_usage(x, &xin, &xout);
    add_count(&in, xin);
    add_count(&out, xout);
    return pl_json_pack(tok, "{s:I, s:I, s:I}", "tokens", (int64_t)(xin + xout),
                        "tokens_in", (int64_t)in, "tokens_out", (int64_t)out);
}

int pl__llm_add_tokens(cJSON *payload, const cJSON *tok)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, tok)
    {
        cJSON *d = cJSON_Duplicate(f, 1);
        if (!d || !cJSON_AddItemToObject(payload, f->string, d)) {
            cJSON_Delete(d);
            return pl__err(PL_ENOMEM, "out of memory");
        }
    }
    return PL_OK;
}

/* An error result ending the turn, with the turn's tokens when it has
 * them. */
static int add_error(pl_steps *out, const char *code, const char *msg,
                     const cJSON *tok)
{
    if (!tok)
        return pl_steps_add_error(out, code, msg);
    cJSON *p = NULL;
    int st = pl_json_pack(&p, "{s:b, s:s, s:s}", "error", 1, "code", code,
                          "message", msg);
    if (!st)
        st = pl__llm_add_tokens(p, tok);
    if (!st)
        st = pl_steps_add(out, PL_STEP_ACTION_RESULT, NULL, p);
    cJSON_Delete(p);
    return st;
}

typedef struct exchange_args {
    const pl__llm *m;
    const pl__llm_request *req;
    pl__llm_deltas *deltas; /* NULL: no streaming */
    bool ran;               /* the model was asked (not served) */
    int64_t deadline_ms;    /* the call's, pl_ctx_deadline() */
} exchange_args;

static int do_exchange(cJSON **out, void *user)
{
    exchange_args *x = user;
    x->ran = true;
    return pl__llm_exchange(out, x->m, x->req->body, x->req->len,
                            x->req->sha256, x->req->script_pos, x->deadline_ms,
                            x->deltas);
}

/* On replay: the recorded exchange answered this very request. */
static bool same_request(const cJSON *recorded, char *why, size_t why_size,
                         void *user)
{
    const pl__llm_request *req = user;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(recorded,
                                                        "request_sha256");
    if (!cJSON_IsString(sha)) /* recorded before requests had digests */
        return true;
    if (strcmp(sha->valuestring, req->sha256) == 0)
        return true;
    snprintf(why, why_size,
             "the model was asked another request (SHA-256 %.64s, "
             "recorded %.64s): the system prompt, the tools or the "
             "conversation changed",
             req->sha256, sha->valuestring);
    return false;
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

/* One model call, as a recorded exchange; caller frees *value.  On replay
 * the request is built all the same, and must be the one recorded. */
static int one_exchange(cJSON **value, pl_ctx *ctx, const pl__llm *m,
                        const pl_action *a, const pl__llm_tool *tools,
                        size_t n_tools, unsigned *n_exchanges)
{
    pl__llm_request req;
    int st = pl__llm_request_build(&req, ctx, m, a, tools, n_tools);
    if (st)
        return st;
    *n_exchanges = req.n_exchanges;
    pl__llm_deltas d = {m,
                        pl_ctx_run_id(ctx),
                        pl_ctx_path(ctx),
                        req.n_exchanges + 1,
                        tools,
                        n_tools,
                        false};
    exchange_args x = {m, &req, m->o.on_delta ? &d : NULL, false,
                       pl_ctx_deadline(ctx)};
    pl_side_effect_match match = PL_SIDE_EFFECT_MATCH_INIT;
    match.fn = same_request;
    match.user = &req;
    st = pl_ctx_side_effect_checked(value, ctx, PL__LLM_EXCHANGE, do_exchange,
                                    &match, &x);
    pl__llm_request_done(&req, m, st == PL_OK);
    /* a turn served from the ledger: its answer, whole; and the end of a
     * turn answered */
    const cJSON *ans = st ? NULL
                          : cJSON_GetObjectItemCaseSensitive(*value, "answer");
    if (ans && x.deltas && !x.ran)
        pl__llm_delta_whole(x.deltas, ans, true);
    if (ans && x.deltas)
        pl__llm_delta_send(x.deltas, PL_LLM_DELTA_END, "", 0, NULL, 0, !x.ran);
    /* an answer streamed that is not recorded (the store failed at the
     * turn's commit) is no answer: what was shown of it is void */
    else if (st && x.deltas && x.deltas->sent)
        pl__llm_delta_send(x.deltas, PL_LLM_DELTA_RESTARTED, "", 0, NULL, 0,
                           false);
    return st;
}

/* The bytes of @p v's strings, counted until they reach @p enough. */
static size_t strings_reach(const cJSON *v, size_t enough)
{
    size_t n = 0;
    for (const cJSON *c = v ? v->child : NULL; c && n < enough; c = c->next)
        n += cJSON_IsString(c) && c->valuestring ? strlen(c->valuestring)
                                                 : strings_reach(c, enough - n);
    return n;
}

/* How many re-prompts in a row end the ledger (each a turn of its own). */
static unsigned reprompts_in_a_row(pl_ctx *ctx)
{
    const pl_steps *ledger = NULL;
    unsigned n = 0;
    if (pl_ctx_ledger(&ledger, ctx))
        return 0; /* the exchange will fail the same way */
    for (size_t i = pl_steps_count(ledger); i > 0; i--) {
        const pl_step *s = pl_steps_at(ledger, i - 1);
        if (pl__llm_exchange_of(s))
            continue;
        if (pl_step_type_of(s) != PL_STEP_TEXT ||
            !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                           "reprompt")))
            break;
        n++;
    }
    return n;
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
    while (i > 0 && !pl__llm_exchange_of(pl_steps_at(ledger, i - 1)))
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

/*
 * One turn: one model call.  A malformed answer, with re-prompts allowed
 * and left, ends the turn with the re-prompt (a text step asking for
 * another turn), so that each re-prompt is a turn of the loop and counts
 * against its budget.
 */
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
    cJSON *v = NULL, *tok = NULL;
    unsigned n = 0;
    uint64_t in = 0, outn = 0;
    char *why = NULL;
    int st = make_tools(&tools, &n_tools, ctx, m, a);
    if (!st)
        st = tokens_before(&in, &outn, ctx, m);
    if (!st)
        st = one_exchange(&v, ctx, m, a, tools, n_tools, &n);
    if (!st)
        st = turn_tokens(&tok, in, outn, v);
    if (st)
        goto done;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(v, "error");
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(v, "answer");
    if (err) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        st = add_error(out,
                       cJSON_IsString(code) ? code->valuestring : "ModelError",
                       cJSON_IsString(msg) ? msg->valuestring
                                           : "model call failed",
                       tok);
        goto done;
    }
    st = ans ? pl__llm_answer_steps(out, &why, m, ans, a, tools, n_tools, n,
                                    tok)
             : (why = pl__strdup("the recorded exchange has no answer"),
                PL_EJSON);
    if (st != PL_EJSON || !why)
        goto done;
    if (m->o.malformed != PL_LLM_MALFORMED_REPROMPT ||
        reprompts_in_a_row(ctx) >= m->o.reprompt_limit) {
        char *msg = pl__asprintf("the model's answer cannot become steps: %s",
                                 why);
        st = msg ? add_error(out, PL_LLM_ERR_INVALID_MODEL_ACTION, msg, tok)
                 : PL_ENOMEM;
        free(msg);
        goto done;
    }
    char *cat = catalog(tools, n_tools);
    char *text = cat ? pl__asprintf("Your last answer could not be used: "
                                    "%s. Answer again, with text or with "
                                    "calls of these tools, arguments a "
                                    "JSON object:%s",
                                    why, cat)
                     : NULL;
    cJSON *p = NULL;
    st = text ? pl_json_pack(&p, "{s:s, s:b, s:b}", "text", text, "reprompt", 1,
                             "again", 1)
              : PL_ENOMEM;
    if (!st && tok)
        st = pl__llm_add_tokens(p, tok);
    if (!st)
        st = pl_ctx_emit(ctx, out, PL_STEP_TEXT, NULL, p);
    cJSON_Delete(p);
    free(text);
    free(cat);
done:
    free(why);
    cJSON_Delete(tok);
    bool large = strings_reach(v, PL__LARGE_FREE) >= PL__LARGE_FREE;
    cJSON_Delete(v);
    if (large) /* its pages go now, not kept beside the steps made of it */
        pl__heap_release();
    free_tools(tools, n_tools);
    return st;
}

int pl_llm_register(pl_registry *reg, const char *name, const char *model_url,
                    const char *system_prompt, const pl_llm_options *opts)
{
    if (!reg || !name || !model_url)
        return pl__err(PL_EINVAL, "pl_llm_register: reg, name and model_url "
                                  "are required");
    pl_llm_options o;
    if (pl__struct_in(&o, opts, &pl__llm_options_layout, "pl_llm_register"))
        return PL_EINVAL;
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
    if (o.api_key_env && (!*o.api_key_env || strchr(o.api_key_env, '=')))
        return pl__err(PL_EINVAL,
                       "pl_llm_register: api_key_env '%.100s' is no "
                       "environment variable's name (empty, or holding '=')",
                       o.api_key_env);
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
#if !PL_WITH_CURL
    if (m->url.provider != PL__LLM_SCRIPTED) {
        pl__llm_url_free(&m->url);
        free(m);
        return pl__err(PL_EINVAL,
                       "pl_llm_register: model '%.200s' is reached over HTTP, "
                       "and policyledger was built without libcurl "
                       "(PL_WITH_CURL=OFF): only scripted:// models work",
                       model_url);
    }
#endif
    m->o = o;
    m->conn = pl__llm_conn_new();
    m->cache = pl__llm_reqcache_new();
    m->name = pl__strdup(name);
    m->system_prompt = system_prompt ? pl__strdup(system_prompt) : NULL;
    m->api_key_env = o.api_key_env ? pl__strdup(o.api_key_env) : NULL;
    char *base = o.base_url ? pl__strdup(o.base_url) : NULL;
    m->o.base_url = base;
    m->o.api_key_env = NULL;
    m->o.output_schema = NULL;
    m->o.description = NULL;
    if (!m->conn || !m->cache || !m->name ||
        (system_prompt && !m->system_prompt) ||
        (o.api_key_env && !m->api_key_env) || (o.base_url && !base)) {
        llm_free(m);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    const char *bad = base ? pl__llm_base_bad(base) : NULL;
    if (bad) {
        llm_free(m);
        return pl__err(PL_EINVAL,
                       "pl_llm_register: base_url '%.200s' is not an http:// "
                       "or https:// URL with a host and a port of 1 to 65535 "
                       "(%s)",
                       o.base_url, bad);
    }
    if (o.output_schema) {
        /* a string cJSON would cut at a NUL is refused, naming it */
        st = pl_json_parse(&m->output_schema, o.output_schema,
                           strlen(o.output_schema));
        if (st == PL_ENOMEM) {
            llm_free(m);
            return st;
        }
        if (st) {
            char why[PL__ERRMSG_MAX];
            pl__errmsg_save(why);
            llm_free(m);
            return pl__err(PL_EINVAL, "pl_llm_register: output_schema: %s",
                           why);
        }
        if (!cJSON_IsObject(m->output_schema)) {
            llm_free(m);
            return pl__err(PL_EINVAL, "pl_llm_register: output_schema is not "
                                      "a JSON object");
        }
        if ((st = pl_schema_compile(&m->output_check, m->output_schema))) {
            char why[200];
            snprintf(why, sizeof why, "%s", pl_errmsg());
            llm_free(m);
            return pl__err(st == PL_ENOMEM ? st : PL_EINVAL,
                           "pl_llm_register: output_schema: %s", why);
        }
    }
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = llm_policy;
    d.user = m;
    d.description = o.description;
    if ((st = pl_registry_add_owned(reg, &d, llm_free)))
        llm_free(m);
    return st;
}

static int count_tokens(const pl_step *s, void *user)
{
    pl_llm_tokens *t = user;
    const cJSON *x = pl__llm_exchange_of(s);
    if (!x)
        return 0;
    uint64_t in, outp;
    exchange_usage(x, &in, &outp);
    t->exchanges++;
    t->input += in;
    t->output += outp;
    return 0;
}

int pl_llm_run_tokens(pl_llm_tokens *out, pl_engine *engine, const char *run_id)
{
    if (!out || !engine || !run_id)
        return pl__err(PL_EINVAL, "pl_llm_run_tokens: NULL %s",
                       !out      ? "out"
                       : !engine ? "engine"
                                 : "run id");
    if (pl__struct_version_ok(out->version, &pl__llm_tokens_layout,
                              "pl_llm_run_tokens"))
        return PL_EINVAL;
    pl_llm_tokens t = PL_LLM_TOKENS_INIT;
    pl__struct_out(out, &t, &pl__llm_tokens_layout);
    int st = pl_run_walk(engine, run_id, count_tokens, &t);
    if (!st)
        pl__struct_out(out, &t, &pl__llm_tokens_layout);
    return st;
}
