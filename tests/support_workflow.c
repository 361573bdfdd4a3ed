/*
 * support_workflow.c -- the order workflow (support_workflow.h says what
 * each policy does).  Built into test_workflow and into
 * workflow_plugin.so, so it uses the public header alone.
 */
#include "support_workflow.h"

#include <policyledger_llm.h>
#include <policyledger_mcp.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const tool_names[] = {"reserve", "charge", "ship", "release",
                                         "post"};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static bool put_line(int fd, const char *line)
{
    size_t n = strlen(line);
    return write(fd, line, n) == (ssize_t)n;
}

static int tool(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    const char *name = user;
    const char *fx = getenv("WORKFLOW_FX");
    if (!fx)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "the tools need WORKFLOW_FX");
    const char *ms_env = getenv("WORKFLOW_TOOL_MS");
    char *end = NULL;
    long ms = ms_env ? strtol(ms_env, &end, 10) : 10;
    if (ms_env && (*end || ms < 0 || ms > 1000))
        ms = 10;
    int fd = open(fx, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return pl_steps_add_error(out, "IO", "cannot open WORKFLOW_FX");
    char line[600];
    long pid = (long)getpid();
    bool ok = true;
    snprintf(line, sizeof line, "B %s %ld %lld\n", pl_ctx_run_id(ctx), pid,
             now_ns());
    ok = ok && put_line(fd, line);
    nap_ms(ms / 2);
    snprintf(line, sizeof line, "E %s %s %ld\n", pl_ctx_idempotency_key(ctx),
             name, pid);
    ok = ok && put_line(fd, line);
    nap_ms(ms - ms / 2);
    snprintf(line, sizeof line, "L %s %ld %lld\n", pl_ctx_run_id(ctx), pid,
             now_ns());
    ok = ok && put_line(fd, line);
    close(fd);
    if (!ok)
        return pl_steps_add_error(out, "IO", "cannot write WORKFLOW_FX");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    return pl_steps_add_resultf(out, "{s:s, s:i}", "tool", name, "n",
                                cJSON_IsNumber(n) ? n->valueint : -1);
}

static int int_of(const cJSON *payload, const char *name, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(payload, name);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static int invoice(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int n = int_of(a->payload, "n", -1);
    int round = int_of(a->payload, "round", 0);
    int amount = int_of(a->payload, "amount", 0);
    cJSON *posted = NULL;
    int st = pl_ctx_invokef(&posted, ctx, "post", "{s:i, s:i}", "n", n,
                            "amount", amount);
    cJSON_Delete(posted);
    if (st)
        return st;
    cJSON *crm = NULL; /* the customer's record, an MCP server's tool */
    st = pl_ctx_invokef(&crm, ctx, WORKFLOW_MCP_NAME ".echo", "{s:i}", "n", n);
    cJSON_Delete(crm);
    if (st)
        return st;
    cJSON *noted = NULL;
    st = pl_ctx_invokef(&noted, ctx, "note", "{s:s}", "text",
                        "One line of thanks for the order.");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(noted, "text");
    if (!st && !cJSON_IsString(text))
        st = pl_errorf(PL_EPOLICY, "invoice: the note has no text");
    if (!st)
        st = pl_steps_add_resultf(out, "{s:i, s:i, s:s}", "invoice",
                                  n * 100 + round, "amount", amount, "note",
                                  text->valuestring);
    cJSON_Delete(noted);
    return st;
}

/* The saga's compensation, and the end of an order not paid in time. */
static int release(pl_ctx *ctx, int n)
{
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "release", "{s:i}", "n", n);
    cJSON_Delete(r);
    return st;
}

/* Round 0's wait for the payment: PL_OK with *paid and *dup set, or
 * PL_ETIMEDOUT once "release" is called, or the status that ends the
 * run (PL_ECANCELLED once "release" is called). */
static int await_payment(pl_ctx *ctx, int n, int timeout, int *paid, int *dup)
{
    cJSON *ev = NULL;
    int st = pl_ctx_wait_event(&ev, ctx, "payment",
                               timeout < 0 ? PL_WAIT_FOREVER : timeout);
    if (st == PL_ETIMEDOUT || st == PL_ECANCELLED) {
        int rs = release(ctx, n);
        return rs ? rs : st;
    }
    if (st)
        return st;
    *paid = int_of(ev, "amount", -1);
    cJSON_Delete(ev);
    /* a payment is sent once: a second one here was delivered twice */
    st = pl_ctx_wait_event(&ev, ctx, "payment", 0);
    cJSON_Delete(ev);
    if (st != PL_OK && st != PL_ETIMEDOUT)
        return st;
    *dup = st == PL_OK;
    return PL_OK;
}

static int fan_out(pl_ctx *ctx, int n, int round, int paid)
{
    cJSON *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = cJSON_CreateObject();
        if (!p[i] || !cJSON_AddNumberToObject(p[i], "n", n) ||
            !cJSON_AddNumberToObject(p[i], "round", round)) {
            for (int j = 0; j <= i; j++)
                cJSON_Delete(p[j]);
            return PL_ENOMEM;
        }
    }
    int st = cJSON_AddNumberToObject(p[1], "amount", paid) ? PL_OK : PL_ENOMEM;
    pl_decorator rate;
    pl_rate_limit_options ro = PL_RATE_LIMIT_OPTIONS_INIT;
    ro.resource = WORKFLOW_RATE_RESOURCE;
    ro.limit = WORKFLOW_RATE_LIMIT;
    ro.window_ms = WORKFLOW_RATE_WINDOW_MS;
    if (!st)
        st = pl_decorator_rate_limit(&rate, &ro);
    pl_action act[3] = {PL_ACTION_INIT, PL_ACTION_INIT, PL_ACTION_INIT};
    pl_call_spec spec[3] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT,
                            PL_CALL_SPEC_INIT};
    for (int i = 0; i < 3; i++) {
        act[i].policy = tool_names[i];
        act[i].payload = p[i];
        spec[i].action = &act[i];
    }
    spec[1].decorators = &rate;
    spec[1].n_decorators = 1;
    pl_step *res[3] = {NULL, NULL, NULL};
    if (!st)
        st = pl_ctx_call_all(res, ctx, spec, 3);
    for (int i = 0; i < 3; i++) {
        pl_step_free(res[i]);
        cJSON_Delete(p[i]);
    }
    return st;
}

/* The newest version of "invoice-child" this code has: WORKFLOW_VERSION,
 * 1 or 2 (default 1). */
static int version_max(void)
{
    const char *v = getenv("WORKFLOW_VERSION");
    return v && !strcmp(v, "2") ? 2 : 1;
}

/* The child "invoice", its note (the model's) in @p note. */
static int invoice_order(pl_ctx *ctx, int n, int round, int paid, char *note,
                         size_t size)
{
    cJSON *inv = NULL;
    int st = pl_ctx_invokef(&inv, ctx, "invoice", "{s:i, s:i, s:i}", "n", n,
                            "round", round, "amount", paid);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(inv, "note");
    if (!st && !cJSON_IsString(text))
        st = pl_errorf(PL_EPOLICY, "order: the invoice has no note");
    if (!st)
        snprintf(note, size, "%s", text->valuestring);
    cJSON_Delete(inv);
    return st;
}

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *pl = a->payload;
    int n = int_of(pl, "n", -1);
    int rounds = int_of(pl, "rounds", 1);
    int round = int_of(pl, "round", 0);
    int paid = int_of(pl, "paid", 0);
    int dup = int_of(pl, "dup", 0);
    int v = 0;
    int st = pl_ctx_version(&v, ctx, "invoice-child", PL_VERSION_DEFAULT,
                            version_max());
    if (st)
        return st;
    const cJSON *timeout = cJSON_GetObjectItemCaseSensitive(pl, "timeout");
    if (round == 0 && cJSON_IsNumber(timeout)) {
        st = await_payment(ctx, n, timeout->valueint, &paid, &dup);
        if (st == PL_ETIMEDOUT)
            return pl_steps_add_resultf(out, "{s:i, s:s}", "order", n, "status",
                                        "expired");
        if (st)
            return st;
    }
    /* version 1 invoices after the fan-out, version 2 before it */
    char note[256] = "";
    if (v >= 2)
        st = invoice_order(ctx, n, round, paid, note, sizeof note);
    if (!st)
        st = fan_out(ctx, n, round, paid);
    if (!st && v == 1)
        st = invoice_order(ctx, n, round, paid, note, sizeof note);
    if (st)
        return st;
    if (round + 1 < rounds) {
        cJSON *next = NULL;
        st = pl_json_pack(&next, "{s:i, s:i, s:i, s:i, s:i}", "n", n, "rounds",
                          rounds, "round", round + 1, "paid", paid, "dup", dup);
        if (!st)
            st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
        return pl_steps_add_resultf(out, "{s:i, s:s, s:i}", "order", n,
                                    "status", "continued", "round", round);
    }
    return pl_steps_add_resultf(out, "{s:i, s:s, s:i, s:i, s:b, s:s}", "order",
                                n, "status", "done", "paid", paid, "rounds",
                                rounds, "dup", dup != 0, "note", note);
}

static int add(pl_registry *reg, const char *name, pl_policy_fn fn, void *user)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = fn;
    d.user = user;
    d.code_version = WORKFLOW_CODE;
    return pl_registry_add(reg, &d);
}

int workflow_register(pl_registry *reg)
{
    const char *script = getenv("WORKFLOW_SCRIPT");
    if (!script)
        return pl_errorf(PL_EINVAL, "workflow: WORKFLOW_SCRIPT is not set");
    char url[4200];
    if (snprintf(url, sizeof url, "scripted://%s", script) >= (int)sizeof url)
        return pl_errorf(PL_EINVAL, "workflow: WORKFLOW_SCRIPT is too long");
    int st = pl_llm_register(reg, "note", url, "You write one line.", NULL);
    if (!st)
        st = add(reg, "order", order, NULL);
    if (!st)
        st = add(reg, "invoice", invoice, NULL);
    for (size_t i = 0; !st && i < sizeof tool_names / sizeof *tool_names; i++)
        st = add(reg, tool_names[i], tool, (void *)tool_names[i]);
    return st;
}

int workflow_register_mcp(pl_mcp **out, pl_registry *reg)
{
    const char *spec = getenv("WORKFLOW_MCP");
    if (!spec)
        return pl_errorf(PL_EINVAL, "workflow: WORKFLOW_MCP is not set");
    static const char *const idempotent[] = {"echo"};
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    o.idempotent = idempotent;
    o.n_idempotent = 1;
    return pl_mcp_register(out, reg, WORKFLOW_MCP_NAME, spec, &o);
}
