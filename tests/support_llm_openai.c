/* The OpenAI-compatible LLM policies' tests' shared helpers. */
#include "support_llm_openai.h"

/* A 200 whose message has @p text (may be NULL) and one tool call (name
 * NULL: none) with raw @p args. */
cJSON *answer(const char *text, const char *id, const char *name,
              const char *args)
{
    cJSON *msg = NULL;
    cr_assert_eq(pl_json_pack(&msg, "{s:s, s:s?}", "role", "assistant",
                              "content", text),
                 PL_OK);
    if (name) {
        cJSON *tc = NULL;
        cr_assert_eq(pl_json_pack(&tc, "[{s:s, s:s, s:{s:s, s:s}}]", "id", id,
                                  "type", "function", "function", "name", name,
                                  "arguments", args),
                     PL_OK);
        cJSON_AddItemToObject(msg, "tool_calls", tc);
    }
    cJSON *r = NULL;
    cr_assert_eq(pl_json_pack(&r, "{s:i, s:{s:[{s:o, s:s}], s:{s:i, s:i}}}",
                              "status", 200, "body", "choices", "message", msg,
                              "finish_reason", "stop", "usage", "prompt_tokens",
                              20, "completion_tokens", 5),
                 PL_OK);
    return r;
}

cJSON *raw(const char *json) { return t_json(json); }

/* {"responses": [...]} as text, taking the items over. */
char *script(int n, ...)
{
    cJSON *arr = cJSON_CreateArray();
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, va_arg(ap, cJSON *));
    va_end(ap);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddItemToObject(s, "responses", arr);
    char *t = t_text(s);
    cJSON_Delete(s);
    return t;
}

t_server g_srv;

void serve(char *script_text)
{
    t_server_start(&g_srv, script_text);
    free(script_text);
}

/* Options pointing at the server, with short timeouts and waits. */
pl_llm_options opts(void)
{
    pl_llm_options o = PL_LLM_OPTIONS_INIT;
    o.base_url = g_srv.base;
    o.timeout_ms = 2000;
    o.connect_timeout_ms = 2000;
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 50;
    return o;
}

pl_engine *engine_for(pl_registry **reg, const pl_llm_options *o)
{
    *reg = t_llm_registry("openai://test-model", o);
    return t_engine(t_store_path(), *reg, PL_DURABILITY_PROCESS);
}

const cJSON *req(const cJSON *log, int i)
{
    const cJSON *e = cJSON_GetArrayItem(log, i);
    cr_assert_not_null(e, "no request %d in the server's log", i);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "body");
    cr_assert(cJSON_IsObject(b), "request %d's body is not a JSON object", i);
    return b;
}

const cJSON *at(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

void expect_str(const char *got, const char *want)
{
    cr_expect(got && strcmp(got, want) == 0, "expected \"%s\", got \"%s\"",
              want, got ? got : "(null)");
}

void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle), "expected \"%s\" in \"%s\"", needle,
              hay ? hay : "(null)");
}

/* The agent's result, an error: its code and message. */
void expect_error(const pl_outcome *o, const char *code, const char *in_message)
{
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run %s: %s",
                 pl_run_status_name(o->status), o->reason ? o->reason : "");
    const cJSON *r = pl_outcome_result(o);
    cr_expect(cJSON_IsTrue(at(r, "error")), "expected an error result");
    expect_str(t_str(r, "code"), code);
    if (in_message)
        expect_has(t_str(r, "message"), in_message);
}

char g_events[1 << 16];

size_t g_events_len;

void on_event(const pl_event *ev, void *user)
{
    (void)user;
    int n = snprintf(g_events + g_events_len, sizeof g_events - g_events_len,
                     "%s %s %s\n", pl_event_kind_name(ev->kind),
                     ev->policy ? ev->policy : "",
                     ev->detail ? ev->detail : "");
    if (n > 0 && g_events_len + (size_t)n < sizeof g_events)
        g_events_len += (size_t)n;
}
