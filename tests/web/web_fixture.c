/*
 * web_fixture -- makes the stores ledger-web's browser tests open, with the
 * real engine.
 *
 *   web_fixture STORE many N
 *       N runs "job-000000".. of the policy "job": every 50th (from 7)
 *       failed, every 100th (from 3) suspended waiting for a human, the
 *       rest completed; every 1000th payload holds the word "needle".
 *   web_fixture STORE hostile SCRIPT
 *       runs whose ids, policy names, payloads, error messages, prompts and
 *       model answers hold markup and script: "<script>", "onerror=",
 *       "javascript:" URLs, and 1 MB strings.  The model is the scripted
 *       one, playing SCRIPT (which this writes).  Each hostile string, if
 *       ever run as script or markup, sets window.__xss.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger_llm.h>

#define S_SCRIPT "<script>window.__xss='script'</script>"
#define S_ATTR "\"onerror=\"window.__xss='attr'\" x=\""
#define S_IMG "<img src=x onerror=\"window.__xss='img'\">"
#define S_URL "javascript:window.__xss='url'"
#define S_SVG "<svg onload=\"window.__xss='svg'\"></svg>"
#define S_ALL S_SCRIPT " " S_ATTR " " S_IMG " " S_URL " " S_SVG
#define BIG (1024 * 1024)

/* A 1 MB string of the hostile strings over and over. */
static char *big_string(void)
{
    char *s = malloc(BIG + 1);
    if (!s)
        return NULL;
    size_t k = strlen(S_ALL);
    for (size_t i = 0; i < BIG; i++)
        s[i] = (S_ALL " ")[i % (k + 1)];
    s[BIG] = '\0';
    return s;
}

static int job(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = 0;
    if (pl_json_unpack(a->payload, "{s:i}", "n", &n))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    if (n % 50 == 7)
        return pl_errorf(PL_EPOLICY, "job %d: the card was declined", n);
    if (n % 100 == 3) {
        cJSON *p = NULL, *answer = NULL;
        int st = pl_json_pack(&p, "{s:s, s:i}", "question", "ship this job?",
                              "job", n);
        if (!st)
            st = pl_ctx_invoke(&answer, ctx, "human", p);
        cJSON_Delete(p);
        if (!st)
            st = pl_steps_add_result(out, answer);
        cJSON_Delete(answer);
        return st;
    }
    return pl_steps_add_resultf(out, "{s:i, s:s}", "job", n, "done", "yes");
}

/* Hands its payload back, and calls "leaf" on the way. */
static int echo(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "leaf", a->payload);
    cJSON_Delete(r);
    return st ? st : pl_steps_add_result(out, a->payload);
}

static int leaf(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    return pl_steps_add_result(out, a->payload);
}

static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    return pl_errorf(PL_EPOLICY, "declined: %s", S_ALL);
}

static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invoke(&answer, ctx, "human", a->payload);
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

/* One model call: its answer is the run's result. */
static int chat(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invoke(&answer, ctx, "model", a->payload);
    if (!st || st == PL_ERESULT)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int add(pl_registry *reg, const char *name, pl_policy_fn fn)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = fn;
    d.idempotent = true;
    d.code_version = "web-fixture-1";
    return pl_registry_add(reg, &d);
}

static int start(pl_engine *e, const char *id, const char *policy,
                 cJSON *payload)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &root, &ro);
    cJSON_Delete(payload);
    pl_outcome_free(o);
    if (st) {
        fprintf(stderr, "web_fixture: run %s: %s\n", id, pl_errmsg());
        return 1;
    }
    return 0;
}

static int many(pl_engine *e, long n)
{
    for (long i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "job-%06ld", i);
        cJSON *p = NULL;
        if (pl_json_pack(&p, "{s:i, s:s}", "n", (int)i, "note",
                         i % 1000 == 0 ? "a needle in the haystack" : "hay") ||
            start(e, id, "job", p))
            return 1;
    }
    return 0;
}

static int write_script(const char *path)
{
    cJSON *doc = NULL;
    if (pl_json_pack(&doc, "{s:[{s:s, s:{s:i, s:i}}]}", "responses", "text",
                     "Here is the link: " S_ALL " [click](" S_URL ")", "usage",
                     "input", 120, "output", 48))
        return 1;
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    FILE *f = text ? fopen(path, "w") : NULL;
    int bad = !f || fputs(text, f) < 0;
    if (f && fclose(f))
        bad = 1;
    free(text);
    return bad;
}

static int hostile(pl_engine *e)
{
    char *big = big_string();
    cJSON *p = NULL;
    int bad = !big;
    /* ids hold only [A-Za-z0-9._:-]: a "javascript:" one is possible */
    bad = bad ||
          pl_json_pack(&p, "{s:s, s:s, s:s, s:s, s:s}", "script", S_SCRIPT,
                       "attr", S_ATTR, "img", S_IMG, "url", S_URL, "svg",
                       S_SVG) ||
          start(e, "javascript:window.__xss", "echo", p);
    bad = bad || pl_json_pack(&p, "{s:s, s:s}", "big", big, "url", S_URL) ||
          start(e, "hostile-big", "echo", p);
    bad = bad || pl_json_pack(&p, "{s:s}", "text", S_ALL) ||
          start(e, "hostile-failed", "boom", p);
    bad = bad ||
          pl_json_pack(&p, "{s:s, s:s, s:s, s:s}", "question", S_SCRIPT,
                       "draft", S_IMG, "ask", S_URL, "big", big) ||
          start(e, "hostile-suspended", "ask", p);
    bad = bad || pl_json_pack(&p, "{s:s}", "text", S_ALL) ||
          start(e, "hostile-model", "chat", p);
    bad = bad || pl_json_pack(&p, "{s:s}", "name", S_SVG) ||
          start(e, "hostile-policy", S_IMG, p);
    free(big);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "many") && strcmp(argv[2], "hostile")) ||
        argc != 4) {
        fprintf(stderr, "usage: web_fixture STORE many N | STORE hostile "
                        "SCRIPT\n");
        return 2;
    }
    bool is_many = !strcmp(argv[2], "many");
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    int st = pl_registry_new(&reg);
    if (!st)
        st = add(reg, "job", job) || add(reg, "echo", echo) ||
             add(reg, "leaf", leaf) || add(reg, "boom", boom) ||
             add(reg, "ask", ask) || add(reg, "chat", chat) ||
             add(reg, S_IMG, echo) || pl_registry_add_human(reg, "human");
    if (!st && !is_many)
        st = write_script(argv[3]);
    char url[4200];
    snprintf(url, sizeof url, "scripted://%s", argv[3]);
    if (!st && !is_many)
        st = pl_llm_register(reg, "model", url, "Answer.", NULL);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS; /* many runs, quickly */
    if (!st)
        st = pl_engine_open(&e, argv[1], reg, &eo);
    if (st) {
        fprintf(stderr, "web_fixture: %s\n", pl_errmsg());
        pl_registry_free(reg);
        return 1;
    }
    int bad = is_many ? many(e, strtol(argv[3], NULL, 10)) : hostile(e);
    pl_engine_close(e);
    pl_registry_free(reg);
    return bad;
}
