/*
 * support_llm_faults.c -- what the protocols' tests (test_llm_faults*.c)
 * share: a request body read into one provider-neutral view by each
 * protocol's own reader, the protocols' table, the loopback server, the
 * agent's fixture and the checks of its answer.
 */
#include "support_llm_faults.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* A request body, provider-neutral                                         */
/* ------------------------------------------------------------------------ */

const cJSON *at(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static vmsg *add_msg(view *v, const char *role)
{
    cr_assert_lt(v->n, MAXN, "too many messages");
    vmsg *m = &v->msgs[v->n++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

static void add_call(vmsg *m, const char *id, const char *name, cJSON *args)
{
    cr_assert_lt(m->n_calls, 4);
    cr_assert(cJSON_IsObject(args), "a call's arguments are not an object");
    m->calls[m->n_calls++] = (vcall){id, name, args};
}

static void add_tool(view *v, const char *name, const char *desc,
                     const cJSON *params)
{
    cr_assert_lt(v->n_tools, MAXN);
    v->tool_names[v->n_tools] = name;
    v->tool_desc[v->n_tools] = desc;
    v->tool_params[v->n_tools++] = params;
}

static cJSON *parse(const char *text)
{
    cr_assert_not_null(text, "expected text to parse");
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "not JSON: %s", text);
    return j;
}

static double num_or_nan(const cJSON *v)
{
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* OpenAI chat completions; Ollama's /api/chat is the same with arguments
 * as objects, the options apart, and the tool's name on results. */
static void chat_view(view *v, const cJSON *b, bool ollama)
{
    v->model = t_str(b, "model");
    if (ollama) {
        cr_expect(cJSON_IsFalse(at(b, "stream")), "stream: false");
        v->temperature = num_or_nan(at(at(b, "options"), "temperature"));
        const cJSON *np = at(at(b, "options"), "num_predict");
        v->max_tokens = cJSON_IsNumber(np) ? np->valueint : -1;
        cr_expect_null(at(b, "temperature"));
        cr_expect_null(at(b, "max_tokens"));
    } else {
        v->temperature = num_or_nan(at(b, "temperature"));
        const cJSON *mt = at(b, "max_tokens");
        v->max_tokens = cJSON_IsNumber(mt) ? mt->valueint : -1;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, at(b, "messages"))
    {
        const char *role = t_str(m, "role");
        cr_assert_not_null(role, "a message without a role");
        if (strcmp(role, "system") == 0) {
            cr_expect_eq(v->n, 0, "the system prompt comes first");
            v->system = t_str(m, "content");
            continue;
        }
        vmsg *x = add_msg(v, role);
        x->text = t_str(m, "content");
        if (strcmp(role, "tool") == 0) {
            x->result_id = t_str(m, "tool_call_id");
            x->result_name = ollama ? t_str(m, "tool_name") : NULL;
            x->result = parse(x->text);
            x->text = NULL;
            continue;
        }
        const cJSON *tc;
        cJSON_ArrayForEach(tc, at(m, "tool_calls"))
        {
            cr_expect_str_eq(t_str(tc, "type"), "function");
            const cJSON *fn = at(tc, "function");
            const cJSON *args = at(fn, "arguments");
            cJSON *obj;
            if (ollama) {
                cr_assert(cJSON_IsObject(args), "Ollama: arguments object");
                obj = cJSON_Duplicate(args, 1);
            } else {
                cr_assert(cJSON_IsString(args), "OpenAI: arguments as text");
                obj = parse(args->valuestring);
            }
            add_call(x, t_str(tc, "id"), t_str(fn, "name"), obj);
        }
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, at(b, "tools"))
    {
        cr_expect_str_eq(t_str(t, "type"), "function");
        const cJSON *fn = at(t, "function");
        add_tool(v, t_str(fn, "name"), t_str(fn, "description"),
                 at(fn, "parameters"));
    }
}

static void openai_view(view *v, const cJSON *b) { chat_view(v, b, false); }
static void ollama_view(view *v, const cJSON *b) { chat_view(v, b, true); }

/* Anthropic messages: the system prompt apart, content blocks. */
static void anthropic_view(view *v, const cJSON *b)
{
    v->model = t_str(b, "model");
    v->system = t_str(b, "system");
    v->temperature = num_or_nan(at(b, "temperature"));
    const cJSON *mt = at(b, "max_tokens");
    cr_assert(cJSON_IsNumber(mt), "Anthropic requires max_tokens");
    v->max_tokens = mt->valueint;
    const cJSON *m;
    cJSON_ArrayForEach(m, at(b, "messages"))
    {
        const char *role = t_str(m, "role");
        cr_assert(role && (strcmp(role, "user") == 0 ||
                           strcmp(role, "assistant") == 0),
                  "Anthropic roles are user and assistant, not %s",
                  role ? role : "(none)");
        const cJSON *content = at(m, "content");
        if (cJSON_IsString(content)) {
            add_msg(v, role)->text = content->valuestring;
            continue;
        }
        cr_assert(cJSON_IsArray(content), "content: text or blocks");
        vmsg *x = strcmp(role, "assistant") == 0 ? add_msg(v, role) : NULL;
        const cJSON *blk;
        cJSON_ArrayForEach(blk, content)
        {
            const char *type = t_str(blk, "type");
            cr_assert_not_null(type);
            if (strcmp(type, "tool_result") == 0) {
                cr_assert_null(x, "tool results come in the user's turn");
                vmsg *r = add_msg(v, "tool");
                r->result_id = t_str(blk, "tool_use_id");
                r->result = parse(t_str(blk, "content"));
                r->is_error = cJSON_IsTrue(at(blk, "is_error"));
            } else if (strcmp(type, "text") == 0) {
                cr_assert_not_null(x, "text blocks: the assistant's");
                x->text = t_str(blk, "text");
            } else {
                cr_assert_str_eq(type, "tool_use");
                cr_assert_not_null(x, "tool_use: the assistant's");
                add_call(x, t_str(blk, "id"), t_str(blk, "name"),
                         cJSON_Duplicate(at(blk, "input"), 1));
            }
        }
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, at(b, "tools"))
        add_tool(v, t_str(t, "name"), t_str(t, "description"),
                 at(t, "input_schema"));
}

/* Gemini generateContent: contents of parts, the model's role "model". */
static void gemini_view(view *v, const cJSON *b)
{
    cr_expect_null(at(b, "model"), "Gemini names the model in the URL");
    const cJSON *si = at(b, "systemInstruction");
    v->system = si ? t_str(cJSON_GetArrayItem(at(si, "parts"), 0), "text")
                   : NULL;
    const cJSON *gc = at(b, "generationConfig");
    v->temperature = num_or_nan(at(gc, "temperature"));
    const cJSON *mt = at(gc, "maxOutputTokens");
    v->max_tokens = cJSON_IsNumber(mt) ? mt->valueint : -1;
    const cJSON *c;
    cJSON_ArrayForEach(c, at(b, "contents"))
    {
        const char *role = t_str(c, "role");
        cr_assert(role &&
                      (strcmp(role, "user") == 0 || strcmp(role, "model") == 0),
                  "Gemini roles are user and model");
        bool model = strcmp(role, "model") == 0;
        vmsg *x = NULL;
        const cJSON *p;
        cJSON_ArrayForEach(p, at(c, "parts"))
        {
            const cJSON *fr = at(p, "functionResponse");
            if (fr) {
                cr_assert(!model, "function responses are the user's");
                vmsg *r = add_msg(v, "tool");
                r->result_name = t_str(fr, "name");
                r->result = cJSON_Duplicate(at(fr, "response"), 1);
                continue;
            }
            if (!x)
                x = add_msg(v, model ? "assistant" : "user");
            const cJSON *fc = at(p, "functionCall");
            if (fc) {
                cr_assert(model, "function calls are the model's");
                add_call(x, NULL, t_str(fc, "name"),
                         cJSON_Duplicate(at(fc, "args"), 1));
            } else {
                x->text = t_str(p, "text");
                cr_assert_not_null(x->text, "a part: text or a function");
            }
        }
    }
    const cJSON *tools = at(b, "tools");
    cr_assert(!tools || cJSON_GetArraySize(tools) == 1,
              "one tools entry with every declaration");
    const cJSON *d;
    cJSON_ArrayForEach(d,
                       at(cJSON_GetArrayItem(tools, 0), "functionDeclarations"))
        add_tool(v, t_str(d, "name"), t_str(d, "description"),
                 at(d, "parameters"));
}

void view_free(view *v)
{
    for (int i = 0; i < v->n; i++) {
        for (int k = 0; k < v->msgs[i].n_calls; k++)
            cJSON_Delete(v->msgs[i].calls[k].args);
        cJSON_Delete(v->msgs[i].result);
    }
}

/* ------------------------------------------------------------------------ */
/* The protocols                                                            */
/* ------------------------------------------------------------------------ */

const proto g_protos[4] = {
    {"openai", "OPENAI_API_KEY", "/v1/chat/completions", true, false, true,
     openai_view},
    {"anthropic", "ANTHROPIC_API_KEY", "/v1/messages", true, false, false,
     anthropic_view},
    {"gemini", "GEMINI_API_KEY", "/v1beta/models/m:generateContent", false,
     false, false, gemini_view},
    {"ollama", NULL, "/api/chat", false, true, false, ollama_view},
};

const proto *g_p;
t_server g_srv;
const char *g_key = "key-for-the-loopback-0123456789";

/* Start the server on @p responses (a JSON array's text, taken over), in
 * @p p's protocol. */
void serve(const proto *p, char *responses)
{
    g_p = p;
    char *s = NULL;
    size_t n = strlen(responses) + 64;
    s = malloc(n);
    cr_assert_not_null(s);
    snprintf(s, n, "{\"protocol\": \"%s\", \"responses\": %s}", p->name,
             responses);
    free(responses);
    setenv("PL_TEST_EXPECT_KEY", g_key, 1);
    if (p->key_env)
        setenv(p->key_env, g_key, 1);
    t_server_start(&g_srv, s);
    free(s);
}

/* A JSON array's text from pieces, joined by commas. */
char *list(int n, ...)
{
    size_t cap = 16;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        cap += strlen(va_arg(ap, const char *)) + 2;
    va_end(ap);
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t k = (size_t)snprintf(s, cap, "[");
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s%s", i ? ", " : "",
                              va_arg(ap, const char *));
    va_end(ap);
    snprintf(s + k, cap - k, "]");
    return s;
}

const char *TEXT_ANSWER = "{\"answer\": {\"text\": \"fine\"}, "
                          "\"usage\": [3, 1]}";

/* t_llm_registry() for @p p on the server, with short timeouts and waits
 * where @p o sets none. */
pl_registry *registry_for(const proto *p, pl_llm_options *o)
{
    char url[128], base[96];
    o->timeout_ms = o->timeout_ms ? o->timeout_ms : 2000;
    o->connect_timeout_ms = 2000;
    o->backoff_base_ms = 10;
    o->backoff_max_ms = 50;
    if (strcmp(p->name, "ollama") == 0) {
        snprintf(url, sizeof url, "ollama://127.0.0.1:%d/m", g_srv.port);
    } else {
        snprintf(url, sizeof url, "%s://m", p->name);
        snprintf(base, sizeof base, "http://127.0.0.1:%d/%s", g_srv.port,
                 strcmp(p->name, "gemini") == 0 ? "v1beta" : "v1");
        o->base_url = base;
    }
    pl_registry *reg = t_llm_registry(url, o);
    o->base_url = NULL; /* copied at registration */
    return reg;
}

void fixture_free(fixture *f)
{
    pl_outcome_free(f->out);
    pl_engine_close(f->e);
    pl_registry_free(f->reg);
}

/* Run the agent on @p text with @p actions against the server. */
void run(fixture *f, const pl_llm_options *base_opts, const char *text,
         const char *actions, const char *run_id)
{
    pl_llm_options o = base_opts ? *base_opts
                                 : (pl_llm_options)PL_LLM_OPTIONS_INIT;
    f->reg = registry_for(g_p, &o);
    f->e = t_engine(t_store_path(), f->reg, PL_DURABILITY_PROCESS);
    f->out = t_agent(f->e, text, actions, run_id);
}

void expect_text(const fixture *f, const char *want)
{
    cr_assert_eq(f->out->status, PL_RUN_COMPLETED, "%s: run %s: %s", g_p->name,
                 pl_run_status_name(f->out->status),
                 f->out->reason ? f->out->reason : "");
    const char *got = t_str(pl_outcome_result(f->out), "text");
    cr_expect(got && strcmp(got, want) == 0, "%s: answer \"%s\", not \"%s\"",
              g_p->name, got ? got : "(none)", want);
}

void expect_error(const fixture *f, const char *code, const char *in_message)
{
    cr_assert_eq(f->out->status, PL_RUN_COMPLETED, "%s: run %s: %s", g_p->name,
                 pl_run_status_name(f->out->status),
                 f->out->reason ? f->out->reason : "");
    const cJSON *r = pl_outcome_result(f->out);
    cr_expect(cJSON_IsTrue(at(r, "error")), "%s: expected an error result",
              g_p->name);
    const char *c = t_str(r, "code"), *m = t_str(r, "message");
    cr_expect(c && strcmp(c, code) == 0, "%s: code %s, not %s", g_p->name,
              c ? c : "(none)", code);
    cr_expect(m && strstr(m, in_message), "%s: \"%s\" not in \"%s\"", g_p->name,
              in_message, m ? m : "(none)");
}

/* Request @p i as a view; every request's tool names are valid. */
void request(view *v, const cJSON *log, int i)
{
    memset(v, 0, sizeof *v);
    const cJSON *e = cJSON_GetArrayItem(log, i);
    cr_assert_not_null(e, "%s: no request %d", g_p->name, i);
    const char *path = t_str(e, "path");
    cr_expect(path && strcmp(path, g_p->path) == 0, "%s: path %s", g_p->name,
              path ? path : "(none)");
    cr_expect_eq(cJSON_GetArraySize(at(e, "bad_names")), 0,
                 "%s: the server refused a tool name", g_p->name);
    const cJSON *b = at(e, "body");
    cr_assert(cJSON_IsObject(b), "%s: request %d is not a JSON object",
              g_p->name, i);
    g_p->view(v, b);
}

/* The first exchange's attempts, from the ledger. */
int attempts(const fixture *f, const char *run)
{
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f->e, run, "0.0"), PL_OK, "%s", pl_errmsg());
    int n = -1;
    for (size_t i = 0; i < pl_steps_count(l) && n < 0; i++)
        if (pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_SIDE_EFFECT)
            n = at(at(pl_step_payload(pl_steps_at(l, i)), "value"), "attempts")
                    ->valueint;
    pl_steps_free(l);
    return n;
}

void expect_str_eq(const char *got, const char *want, const char *what)
{
    cr_expect(got && want && strcmp(got, want) == 0,
              "%s: %s is \"%s\", not \"%s\"", g_p->name, what,
              got ? got : "(none)", want ? want : "(none)");
}
