/*
 * test_llm_faults.c -- every HTTP provider's protocol (OpenAI, Anthropic,
 * Gemini, Ollama) against the loopback server (tests/llm_server.py, which
 * renders one scripted answer in each protocol's shape): tool-call round
 * trips with call ids bound, request bodies read field by field, retries
 * (429 with Retry-After, 500, a dropped connection), a hanging response, a
 * body that is not JSON, an unknown tool, malformed arguments, an oversized
 * body, a 401, and tool names the providers refuse.
 *
 * Each test runs once per protocol: g_protos describes them, and a request
 * body is read into one provider-neutral view (struct view) by the
 * protocol's own reader, which checks each field where that protocol puts
 * it.  Call ids: OpenAI and Anthropic send theirs, and they must come back
 * in the assistant's replayed calls and in the results; Ollama's and
 * Gemini's protocols carry none.  Ollama gets ids made for it (sent in the
 * replayed calls and results, and with the tool's name); Gemini's results
 * bind by order and by name: the n-th functionResponse answers the n-th
 * functionCall of the model's turn, under that call's name.
 */
#include "llm_support.h"

#include <criterion/parameterized.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* A request body, provider-neutral                                         */
/* ------------------------------------------------------------------------ */

#define MAXN 16

typedef struct vcall {
    const char *id; /* NULL: the protocol has none */
    const char *name;
    cJSON *args; /* owned */
} vcall;

typedef struct vmsg {
    const char *role; /* "user", "assistant", "tool" */
    const char *text; /* NULL: none */
    int n_calls;
    vcall calls[4];
    const char *result_id;   /* tool: the call id it answers, or NULL */
    const char *result_name; /* tool: the tool's name, or NULL */
    cJSON *result;           /* tool: the content, parsed; owned */
    bool is_error;
} vmsg;

typedef struct view {
    const char *model; /* NULL where the URL names the model (Gemini) */
    const char *system;
    double temperature; /* NAN: not sent */
    int max_tokens;     /* -1: not sent */
    int n_tools;
    const char *tool_names[MAXN];
    const char *tool_desc[MAXN];
    const cJSON *tool_params[MAXN];
    int n;
    vmsg msgs[MAXN];
} view;

static const cJSON *at(const cJSON *o, const char *key)
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

static void view_free(view *v)
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

typedef struct proto {
    const char *name;    /* the server's protocol switch */
    const char *key_env; /* NULL: no key */
    const char *path;    /* the endpoint, under the server */
    bool ids;            /* the protocol carries call ids */
    bool made_ids;       /* ids are made for it (Ollama) */
    bool text_args;      /* arguments come as JSON text (OpenAI) */
    void (*view)(view *v, const cJSON *body);
} proto;

static const proto g_protos[] = {
    {"openai", "OPENAI_API_KEY", "/v1/chat/completions", true, false, true,
     openai_view},
    {"anthropic", "ANTHROPIC_API_KEY", "/v1/messages", true, false, false,
     anthropic_view},
    {"gemini", "GEMINI_API_KEY", "/v1beta/models/m:generateContent", false,
     false, false, gemini_view},
    {"ollama", NULL, "/api/chat", false, true, false, ollama_view},
};

/* Each test runs once per protocol: Criterion passes the table's index. */
#define PROTO_TEST(test)                                                       \
    ParameterizedTestParameters(llm_faults, test)                              \
    {                                                                          \
        static int ix[] = {0, 1, 2, 3};                                        \
        return cr_make_param_array(int, ix, sizeof ix / sizeof ix[0]);         \
    }                                                                          \
    ParameterizedTest(int *ix, llm_faults, test)

static const proto *g_p;
static t_server g_srv;
static const char *g_key = "key-for-the-loopback-0123456789";

/* Start the server on @p responses (a JSON array's text, taken over), in
 * @p p's protocol. */
static void serve(const proto *p, char *responses)
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
static char *list(int n, ...)
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

static const char *TEXT_ANSWER = "{\"answer\": {\"text\": \"fine\"}, "
                                 "\"usage\": [3, 1]}";

/* t_llm_registry() for @p p on the server, with short timeouts and waits
 * where @p o sets none. */
static pl_registry *registry_for(const proto *p, pl_llm_options *o)
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

typedef struct fixture {
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *out;
} fixture;

static void fixture_free(fixture *f)
{
    pl_outcome_free(f->out);
    pl_engine_close(f->e);
    pl_registry_free(f->reg);
}

/* Run the agent on @p text with @p actions against the server. */
static void run(fixture *f, const pl_llm_options *base_opts, const char *text,
                const char *actions, const char *run_id)
{
    pl_llm_options o = base_opts ? *base_opts
                                 : (pl_llm_options)PL_LLM_OPTIONS_INIT;
    f->reg = registry_for(g_p, &o);
    f->e = t_engine(t_store_path(), f->reg, PL_DURABILITY_PROCESS);
    f->out = t_agent(f->e, text, actions, run_id);
}

static void expect_text(const fixture *f, const char *want)
{
    cr_assert_eq(f->out->status, PL_RUN_COMPLETED, "%s: run %s: %s", g_p->name,
                 pl_run_status_name(f->out->status),
                 f->out->reason ? f->out->reason : "");
    const char *got = t_str(pl_outcome_result(f->out), "text");
    cr_expect(got && strcmp(got, want) == 0, "%s: answer \"%s\", not \"%s\"",
              g_p->name, got ? got : "(none)", want);
}

static void expect_error(const fixture *f, const char *code,
                         const char *in_message)
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
static void request(view *v, const cJSON *log, int i)
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
static int attempts(const fixture *f, const char *run)
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

static void expect_str_eq(const char *got, const char *want, const char *what)
{
    cr_expect(got && want && strcmp(got, want) == 0,
              "%s: %s is \"%s\", not \"%s\"", g_p->name, what,
              got ? got : "(none)", want ? want : "(none)");
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */
/* ------------------------------------------------------------------------ */

PROTO_TEST(tool_calls_round_trip_with_their_ids)
{
    serve(&g_protos[*ix],
          list(2,
               "{\"answer\": {\"text\": \"Working.\", \"tool_calls\": ["
               "{\"id\": \"c_add\", \"name\": \"add\", \"arguments\": "
               "{\"a\": 1, \"b\": 2}},"
               "{\"id\": \"c_eff\", \"name\": \"effect\", \"arguments\": "
               "{\"note\": \"x\"}}]}, \"usage\": [20, 5]}",
               "{\"answer\": {\"text\": \"Done: 3.\"}, \"usage\": [40, 2]}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.temperature = 0.25;
    o.max_tokens = 300;
    fixture f = {0};
    run(&f, &o, "What is 1+2?", "[\"add\", \"effect\"]", "rt");
    expect_text(&f, "Done: 3.");
    cr_expect_eq(t_calls.add, 1);

    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2, "%s", g_p->name);
    const cJSON *e0 = cJSON_GetArrayItem(log, 0);
    if (strcmp(g_p->name, "openai") == 0)
        cr_expect(cJSON_IsTrue(at(e0, "auth_matches")), "bearer key");
    if (strcmp(g_p->name, "anthropic") == 0) {
        cr_expect(cJSON_IsTrue(at(e0, "x_api_key_matches")), "x-api-key");
        expect_str_eq(t_str(e0, "anthropic_version"), "2023-06-01",
                      "anthropic-version");
    }
    if (strcmp(g_p->name, "gemini") == 0)
        cr_expect(cJSON_IsTrue(at(e0, "x_goog_api_key_matches")),
                  "x-goog-api-key");

    /* the first request: model, options, system prompt, user, tools */
    view v;
    request(&v, log, 0);
    if (strcmp(g_p->name, "gemini") != 0)
        expect_str_eq(v.model, "m", "the model");
    expect_str_eq(v.system, "You are terse.", "the system prompt");
    cr_expect_float_eq(v.temperature, 0.25, 1e-9, "%s: temperature", g_p->name);
    cr_expect_eq(v.max_tokens, 300, "%s: max tokens", g_p->name);
    cr_assert_eq(v.n, 1, "%s: one message", g_p->name);
    expect_str_eq(v.msgs[0].role, "user", "the first role");
    expect_str_eq(v.msgs[0].text, "What is 1+2?", "the user's text");
    cr_assert_eq(v.n_tools, 2, "%s: two tools", g_p->name);
    expect_str_eq(v.tool_names[0], "add", "tool 0");
    cr_expect_null(v.tool_desc[0], "%s: add has no description", g_p->name);
    char *p0 = t_text(v.tool_params[0]);
    expect_str_eq(p0, "{\"type\":\"object\"}", "add's parameters");
    free(p0);
    expect_str_eq(v.tool_names[1], "effect", "tool 1");
    expect_str_eq(v.tool_desc[1], "Record a note.", "effect's description");
    const cJSON *req0 = cJSON_GetArrayItem(at(v.tool_params[1], "required"), 0);
    expect_str_eq(cJSON_IsString(req0) ? req0->valuestring : NULL, "note",
                  "effect's required field");
    view_free(&v);

    /* the second: the assistant's calls, then each result bound to its call */
    request(&v, log, 1);
    cr_assert_eq(v.n, 4, "%s: user, assistant, two results; got %d", g_p->name,
                 v.n);
    const vmsg *a = &v.msgs[1];
    expect_str_eq(a->role, "assistant", "the model's role");
    expect_str_eq(a->text, "Working.", "the model's text");
    cr_assert_eq(a->n_calls, 2, "%s: two calls replayed", g_p->name);
    expect_str_eq(a->calls[0].name, "add", "call 0");
    cr_expect_eq(at(a->calls[0].args, "b")->valuedouble, 2);
    expect_str_eq(a->calls[1].name, "effect", "call 1");
    expect_str_eq(t_str(a->calls[1].args, "note"), "x", "call 1's note");
    const vmsg *r0 = &v.msgs[2], *r1 = &v.msgs[3];
    expect_str_eq(r0->role, "tool", "result 0");
    expect_str_eq(r1->role, "tool", "result 1");
    cr_expect_eq(at(r0->result, "sum")->valuedouble, 3, "%s", g_p->name);
    cr_expect(cJSON_IsTrue(at(r1->result, "ok")), "%s", g_p->name);
    if (g_p->ids) { /* the provider's ids, as it sent them */
        expect_str_eq(a->calls[0].id, "c_add", "call 0's id");
        expect_str_eq(a->calls[1].id, "c_eff", "call 1's id");
        expect_str_eq(r0->result_id, "c_add", "result 0's id");
        expect_str_eq(r1->result_id, "c_eff", "result 1's id");
    } else if (g_p->made_ids) { /* ids made here, and the tool's name */
        cr_assert_not_null(a->calls[0].id);
        cr_expect_str_neq(a->calls[0].id, a->calls[1].id);
        expect_str_eq(r0->result_id, a->calls[0].id, "result 0's id");
        expect_str_eq(r1->result_id, a->calls[1].id, "result 1's id");
        expect_str_eq(r0->result_name, "add", "result 0's tool");
        expect_str_eq(r1->result_name, "effect", "result 1's tool");
    } else { /* Gemini: by order and by name */
        cr_expect_null(a->calls[0].id);
        expect_str_eq(r0->result_name, a->calls[0].name, "result 0's name");
        expect_str_eq(r1->result_name, a->calls[1].name, "result 1's name");
    }
    view_free(&v);
    cJSON_Delete(log);

    /* the ledger keeps the ids (made ones where the protocol has none) */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f.e, "rt", "0.0"), PL_OK, "%s", pl_errmsg());
    int k = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_CALL)
            continue;
        const char *id = t_str(pl_step_payload(s), "call_id");
        cr_expect_not_null(id);
        if (g_p->ids)
            expect_str_eq(id, k == 0 ? "c_add" : "c_eff", "the ledger's id");
        k++;
    }
    cr_expect_eq(k, 2);
    pl_steps_free(l);
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    cr_assert_eq(pl_llm_run_tokens(&tok, f.e, "rt"), PL_OK);
    cr_expect_eq(tok.input, 60, "%s", g_p->name);
    cr_expect_eq(tok.output, 7, "%s", g_p->name);

    /* replay: the server hears nothing more */
    pl_outcome *again = NULL;
    cr_assert_eq(pl_run_continue(&again, f.e, "rt", NULL), PL_OK);
    cr_expect_eq(again->status, PL_RUN_COMPLETED);
    cr_expect_eq(t_server_requests(&g_srv), 2);
    pl_outcome_free(again);
    fixture_free(&f);
}

/* A policy of a name providers refuse, counting its calls. */
static int g_odd_calls;
static int odd(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    g_odd_calls++;
    return pl_steps_add_resultf(out, "{s:s}", "ran", (const char *)user);
}

#define LONG_NAME                                                              \
    "a-policy-name-far-longer-than-any-provider-takes/with/slashes/and.dots"   \
    ".too"

PROTO_TEST(tool_names_the_providers_refuse_round_trip)
{
    /* the model calls tool 0 and tool 2 by the names it was given */
    serve(&g_protos[*ix],
          list(2,
               "{\"answer\": {\"tool_calls\": ["
               "{\"id\": \"n1\", \"tool\": 0, \"arguments\": {}},"
               "{\"id\": \"n2\", \"tool\": 2, \"arguments\": {}}]}}",
               "{\"answer\": {\"text\": \"charged\"}}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    fixture f = {0};
    f.reg = registry_for(g_p, &o);
    const char *names[] = {"orders.charge", "tools/read_file", LONG_NAME,
                           "1st"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(pl_registry_add_fn(f.reg, names[i], odd, (void *)names[i]),
                     PL_OK, "%s", pl_errmsg());
    }
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.out = t_agent(f.e, "charge",
                    "[\"orders.charge\", \"tools/read_file\", \"" LONG_NAME
                    "\", \"1st\"]",
                    "names");
    expect_text(&f, "charged");
    cr_expect_eq(g_odd_calls, 2, "%s", g_p->name);

    cJSON *log = t_server_log(&g_srv);
    cr_assert_eq(cJSON_GetArraySize(log), 2);
    view v0, v1;
    request(&v0, log, 0); /* checks every name is valid for the protocol */
    request(&v1, log, 1);
    cr_assert_eq(v0.n_tools, 4);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            cr_expect_str_neq(v0.tool_names[i], v0.tool_names[j]);
    if (strcmp(g_p->name, "gemini") == 0) /* Gemini takes dots */
        expect_str_eq(v0.tool_names[0], "orders.charge", "Gemini's name");
    else
        cr_expect_str_neq(v0.tool_names[0], "orders.charge");
    cr_expect_leq(strlen(v0.tool_names[2]), 64);
    /* the replayed calls carry the names the model used, the same again */
    cr_assert_eq(v1.n, 4);
    expect_str_eq(v1.msgs[1].calls[0].name, v0.tool_names[0], "call 0");
    expect_str_eq(v1.msgs[1].calls[1].name, v0.tool_names[2], "call 1");
    expect_str_eq(v1.tool_names[0], v0.tool_names[0], "the name, again");
    expect_str_eq(t_str(v1.msgs[2].result, "ran"), "orders.charge",
                  "the policy ran");
    expect_str_eq(t_str(v1.msgs[3].result, "ran"), LONG_NAME, "the policy ran");
    view_free(&v0);
    view_free(&v1);
    cJSON_Delete(log);

    /* the ledger names the policies themselves */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, f.e, "names", "0.0"), PL_OK);
    int k = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_ACTION_CALL)
            expect_str_eq(t_str(pl_step_payload(s), "policy"),
                          k++ == 0 ? "orders.charge" : LONG_NAME,
                          "the ledger's policy");
    }
    cr_expect_eq(k, 2);
    pl_steps_free(l);
    fixture_free(&f);
}

PROTO_TEST(a_policy_name_called_as_is_is_an_unknown_tool)
{
    /* '/' is in no protocol's rule: the tool went as another name */
    serve(&g_protos[*ix], list(1, "{\"answer\": {\"tool_calls\": [{\"id\": "
                                  "\"u\", \"name\": \"tools/read_file\", "
                                  "\"arguments\": {}}]}}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    fixture f = {0};
    f.reg = registry_for(g_p, &o);
    cr_assert_eq(pl_registry_add_fn(f.reg, "tools/read_file", odd,
                                    "tools/read_file"),
                 PL_OK);
    f.e = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.out = t_agent(f.e, "read", "[\"tools/read_file\"]", "unk");
    expect_error(&f, PL_LLM_ERR_INVALID_MODEL_ACTION,
                 "not among the tools offered");
    cr_expect_eq(g_odd_calls, 0);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------ */
/* Retries                                                                  */
/* ------------------------------------------------------------------------ */

PROTO_TEST(rate_limited_with_retry_after_then_success)
{
    serve(&g_protos[*ix],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": \"1\"}, "
               "\"body\": {\"error\": {\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "429");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 2, "%s", g_p->name);
    cr_expect_eq(attempts(&f, "429"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(server_error_then_success)
{
    serve(&g_protos[*ix],
          list(2, "{\"status\": 500, \"body\": {\"error\": \"boom\"}}",
               TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "500");
    expect_text(&f, "fine");
    cr_expect_eq(attempts(&f, "500"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(a_dropped_connection_is_retried)
{
    serve(&g_protos[*ix], list(2, "{\"drop\": true}", TEXT_ANSWER));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "drop");
    expect_text(&f, "fine");
    cr_expect_eq(attempts(&f, "drop"), 2, "%s", g_p->name);
    fixture_free(&f);
}

PROTO_TEST(a_hanging_response_times_out)
{
    serve(&g_protos[*ix], list(2, "{\"hang\": 5}", "{\"hang\": 5}"));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.timeout_ms = 300;
    o.max_attempts = 2;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "hang");
    expect_error(&f, PL_ERR_TIMEOUT, "transport error");
    cr_expect_eq(t_server_requests(&g_srv), 2, "%s", g_p->name);
    fixture_free(&f);
}

/* Retry-After as an HTTP date (IMF-fixdate) an hour ahead, past the total
 * time the policy may spend: the transport takes the server's word and
 * gives up after the one request (ignoring the date, its own backoff would
 * retry at once).  No clock is read here: test_llm_retry_after checks the
 * date's arithmetic.  The way back off is the same for every protocol, so
 * once is enough. */
Test(llm_faults, retry_after_as_an_http_date)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"retry_after_in\": 3600, \"body\": "
               "{\"error\": {\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "date");
    expect_error(&f, PL_ERR_RATE_LIMITED, "slow down");
    cr_expect_eq(t_server_requests(&g_srv), 1, "the date was not honoured");
    cr_expect_eq(attempts(&f, "date"), 1);
    fixture_free(&f);
}

/* retry-after-ms (OpenAI's and Anthropic's) wins over Retry-After: here
 * Retry-After alone (an hour) would be past the total time, and the call
 * would give up after one request. */
Test(llm_faults, retry_after_ms_wins_over_retry_after)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": \"3600\", "
               "\"retry-after-ms\": \"5\"}, \"body\": {\"error\": "
               "{\"message\": \"slow down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "ms");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 2);
    fixture_free(&f);
}

/* 408 and 409 are tried again, as the official SDKs do. */
Test(llm_faults, timeout_and_conflict_are_retried)
{
    serve(&g_protos[0],
          list(3, "{\"status\": 408, \"body\": {\"error\": \"slow\"}}",
               "{\"status\": 409, \"body\": {\"error\": \"busy\"}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_attempts = 3;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "408");
    expect_text(&f, "fine");
    cr_expect_eq(t_server_requests(&g_srv), 3);
    cr_expect_eq(attempts(&f, "408"), 3);
    fixture_free(&f);
}

/* A retry that is not made says why, and after how many attempts. */
Test(llm_faults, a_skipped_retry_says_why)
{
    serve(&g_protos[0],
          list(2,
               "{\"status\": 429, \"headers\": {\"Retry-After\": "
               "\"3600\"}, \"body\": {\"error\": {\"message\": \"slow "
               "down\"}}}",
               TEXT_ANSWER));
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.total_timeout_ms = 60000;
    fixture f = {0};
    run(&f, &o, "hi", "[]", "budget");
    expect_error(&f, PL_ERR_RATE_LIMITED,
                 "not tried again after 1 attempt: "
                 "the wait of 3600000 ms the server "
                 "asked for is past the");
    fixture_free(&f);
    serve(&g_protos[0],
          list(2, "{\"status\": 500, \"body\": {\"error\": \"boom\"}}",
               "{\"status\": 500, \"body\": {\"error\": \"boom\"}}"));
    o.max_attempts = 2;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 2;
    fixture g = {0};
    run(&g, &o, "hi", "[]", "spent");
    expect_error(&g, PL_ERR_RETRYABLE_SERVER,
                 "not tried again after 2 attempts: no attempt was left "
                 "(max_attempts 2)");
    fixture_free(&g);
}

/* A response nested past what the parser takes says so, not "not JSON";
 * a body of another shape names what it lacks in plain words. */
Test(llm_faults, deep_and_misshapen_responses_say_what_they_are)
{
    size_t n = 2 * 1200 + 64;
    char *r = malloc(n);
    cr_assert_not_null(r);
    size_t at = (size_t)snprintf(r, n, "{\"raw\": \"");
    for (int i = 0; i < 1200; i++)
        r[at++] = '[';
    for (int i = 0; i < 1200; i++)
        r[at++] = ']';
    snprintf(r + at, n - at, "\"}");
    serve(&g_protos[0], list(1, r));
    free(r);
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "deep");
    expect_error(&f, PL_ERR_INVALID_INPUT, "nests deeper than 1000 levels");
    fixture_free(&f);
    serve(&g_protos[0], list(1, "{\"body\": {\"id\": \"x\"}}"));
    fixture g = {0};
    run(&g, NULL, "hi", "[]", "shape");
    expect_error(&g, PL_ERR_INVALID_INPUT,
                 "the model's response has no choices[0].message object");
    fixture_free(&g);
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                 */
/* ------------------------------------------------------------------------ */

/* The agent, offered @p actions, gets @p response (with @p o, or the
 * defaults) and ends in an error result @p code naming @p in_message,
 * after one request: none of these is retried, and no tool runs. */
static void fails_with(const proto *p, const char *response,
                       const pl_llm_options *o, const char *actions,
                       const char *code, const char *in_message)
{
    char *r = malloc(strlen(response) + 1);
    cr_assert_not_null(r);
    memcpy(r, response, strlen(response) + 1);
    serve(p, list(1, r));
    free(r);
    fixture f = {0};
    run(&f, o, "hi", actions, "fails");
    expect_error(&f, code, in_message);
    cr_expect_eq(t_server_requests(&g_srv), 1, "%s: not retried", p->name);
    cr_expect_eq(t_calls.add, 0);
    fixture_free(&f);
}

PROTO_TEST(a_body_that_is_not_json_is_an_error_result)
{
    fails_with(&g_protos[*ix], "{\"raw\": \"{not json at all\"}", NULL, "[]",
               PL_ERR_INVALID_INPUT, "not JSON");
}

PROTO_TEST(a_body_of_another_shape_is_an_error_result)
{
    fails_with(&g_protos[*ix], "{\"body\": {\"id\": \"x\"}}", NULL, "[]",
               PL_ERR_INVALID_INPUT, "the model's response has no");
}

PROTO_TEST(an_unknown_tool_fails_fast)
{
    fails_with(&g_protos[*ix],
               "{\"answer\": {\"tool_calls\": [{\"id\": \"c9\", \"name\": "
               "\"rm_rf\", \"arguments\": {}}]}}",
               NULL, "[\"add\"]", PL_LLM_ERR_INVALID_MODEL_ACTION, "'rm_rf'");
}

PROTO_TEST(malformed_arguments_fail_fast)
{
    /* OpenAI sends arguments as text, which may not be JSON; the others
     * send a JSON value, which may not be an object */
    const proto *p = &g_protos[*ix];
    fails_with(p,
               p->text_args ? "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", "
                              "\"name\": \"add\", \"raw_arguments\": "
                              "\"{\\\"a\\\": 1,\"}]}}"
                            : "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", "
                              "\"name\": \"add\", \"arguments\": [1, 2]}]}}",
               NULL, "[\"add\"]", PL_LLM_ERR_INVALID_MODEL_ACTION,
               p->text_args ? "not JSON" : "not a JSON object");
}

PROTO_TEST(arguments_against_the_tools_schema_fail_fast)
{
    fails_with(&g_protos[*ix],
               "{\"answer\": {\"tool_calls\": [{\"id\": \"c1\", \"name\": "
               "\"effect\", \"arguments\": {\"note\": 5}}]}}",
               NULL, "[\"effect\"]", PL_LLM_ERR_INVALID_MODEL_ACTION,
               "does not match");
}

PROTO_TEST(an_oversized_body_is_refused)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.max_response_bytes = 4096;
    fails_with(&g_protos[*ix], "{\"size\": 200000}", &o, "[]",
               PL_ERR_INVALID_INPUT, "max_response_bytes");
}

PROTO_TEST(unauthorized_maps_without_retry_and_hides_the_key)
{
    char r[300];
    snprintf(r, sizeof r,
             "{\"status\": 401, \"body\": {\"error\": {\"message\": "
             "\"bad key %s\"}}}",
             g_key);
    serve(&g_protos[*ix], list(1, r));
    fixture f = {0};
    run(&f, NULL, "hi", "[]", "401");
    expect_error(&f, PL_ERR_UNAUTHORIZED, "HTTP 401");
    cr_expect_eq(t_server_requests(&g_srv), 1, "%s: not retried", g_p->name);
    char *res = t_text(pl_outcome_result(f.out));
    if (g_p->key_env) /* Ollama sends no key: its echo is no secret */
        cr_expect(!strstr(res, g_key), "%s: the key is in the result: %s",
                  g_p->name, res);
    free(res);
    fixture_free(&f);
}
