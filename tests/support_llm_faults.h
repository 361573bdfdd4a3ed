/*
 * support_llm_faults.h -- what the protocols' tests (test_llm_faults*.c)
 * share (support_llm_faults.c): a request body as one provider-neutral
 * view, the protocols (g_protos, one Criterion parameter each), the loopback
 * server, the agent's fixture and the checks of its answer.
 */
#ifndef PL_TESTS_SUPPORT_LLM_FAULTS_H
#define PL_TESTS_SUPPORT_LLM_FAULTS_H

#include "llm_support.h"

#include <criterion/parameterized.h>

#include <stdbool.h>

/* ---- a request body, provider-neutral ------------------------------------ */

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

typedef struct proto {
    const char *name;    /* the server's protocol switch */
    const char *key_env; /* NULL: no key */
    const char *path;    /* the endpoint, under the server */
    bool ids;            /* the protocol carries call ids */
    bool made_ids;       /* ids are made for it (Ollama) */
    bool text_args;      /* arguments come as JSON text (OpenAI) */
    void (*view)(view *v, const cJSON *body);
} proto;

/* Each test runs once per protocol: Criterion passes the table's index. */
#define PROTO_TEST(test)                                                       \
    ParameterizedTestParameters(llm_faults, test)                              \
    {                                                                          \
        static int ix[] = {0, 1, 2, 3};                                        \
        return cr_make_param_array(int, ix, sizeof ix / sizeof ix[0]);         \
    }                                                                          \
    ParameterizedTest(int *ix, llm_faults, test)

typedef struct fixture {
    pl_registry *reg;
    pl_engine *e;
    pl_outcome *out;
} fixture;

/* ---- the protocols, the server and the agent ----------------------------- */

/* OpenAI, Anthropic, Gemini, Ollama. */
extern const proto g_protos[4];
/* The protocol the server speaks now (serve()). */
extern const proto *g_p;
extern t_server g_srv;
/* The API key the server expects. */
extern const char *g_key;
/* A scripted plain answer, "fine". */
extern const char *TEXT_ANSWER;

/* @p o's member @p key, or NULL. */
const cJSON *at(const cJSON *o, const char *key);
void view_free(view *v);
/* Start the server on @p responses (a JSON array's text, taken over), in
 * @p p's protocol. */
void serve(const proto *p, char *responses);
/* A JSON array's text from @p n pieces, joined by commas. */
char *list(int n, ...);
/* t_llm_registry() for @p p on the server, with short timeouts and waits
 * where @p o sets none. */
pl_registry *registry_for(const proto *p, pl_llm_options *o);
void fixture_free(fixture *f);
/* Run the agent on @p text with @p actions against the server. */
void run(fixture *f, const pl_llm_options *base_opts, const char *text,
         const char *actions, const char *run_id);
/* The run completed with the answer @p want. */
void expect_text(const fixture *f, const char *want);
/* The run completed with an error result @p code naming @p in_message. */
void expect_error(const fixture *f, const char *code, const char *in_message);
/* Request @p i as a view; every request's tool names are valid. */
void request(view *v, const cJSON *log, int i);
/* The first exchange's attempts, from the ledger. */
int attempts(const fixture *f, const char *run);
void expect_str_eq(const char *got, const char *want, const char *what);

#endif
