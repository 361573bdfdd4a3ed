/*
 * replay_plugin.c -- a plugin for ledger-replay's tests: a run that waits
 * for a human.
 *
 *   "approval"  root: notes "asked", asks "human" (which suspends the run)
 *               with {"question", "order"}, notes the answer, and returns
 *               {"approved": <the answer's "approved">}; with {"fail":
 *               true} it fails the run (PL_EPOLICY) before anything
 *   "note"      a tool: appends "note <idempotency key> <text>" to the file
 *               REPLAY_EFFECTS names (if set) and returns {"noted": text}
 *   "human"     pl_registry_add_human()
 *   "await"     root: notes "waiting", waits for the event "go" (forever,
 *               or {"timeout": ms}), notes "cancelled" and returns
 *               PL_ECANCELLED if cancelled, else returns {"got": payload}
 *               or {"timeout": true}
 *   "nap"       root: notes "napping", sleeps {"ms": ms} (pl_ctx_sleep()),
 *               notes "awake" and returns {"slept": ms}
 *   "gated"     root: a version point "rolling" (versions 0 to
 *               $REPLAY_CODE_VERSION, default 1: the code's build), then
 *               "approval"'s question; returns {"v": the version}
 *   "hold"      root: {"path": P}: creates P.in, then executes (holding
 *               its lease, not parked) while the file P exists; returns {}
 *   "looper"    root: {"left": N}: continues as new with {"left": N - 1}
 *               while N > 0; returns {"left": N}
 *   "extends"   root: notes "one", and "two" too when $REPLAY_EXTEND is
 *               set (new code making a call past an old record's end);
 *               returns no step
 *
 * Built twice: BUILD_TAG changes a description only, so the two builds have
 * different build-ids and replay the same ledgers the same way.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

#ifndef BUILD_TAG
#define BUILD_TAG "a"
#endif

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

static int note(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *text = "";
    if (pl_json_unpack(a->payload, "{s:s}", "text", &text))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "note needs {\"text\": string}");
    const char *path = getenv("REPLAY_EFFECTS");
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (!f)
            return pl_steps_add_error(out, PL_ERR_RETRYABLE_SERVER,
                                      "cannot open the effects file");
        fprintf(f, "note %s %s\n", pl_ctx_idempotency_key(ctx), text);
        fclose(f);
    }
    return pl_steps_add_resultf(out, "{s:s}", "noted", text);
}

static int approval(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *order = "?";
    bool fail = false;
    (void)pl_json_unpack(a->payload, "{s?s, s?b}", "order", &order, "fail",
                         &fail);
    if (fail)
        return PL_EPOLICY;
    cJSON *answer = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "asked");
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "human", "{s:s, s:s}", "question",
                            "ship this order?", "order", order);
    bool approved = false;
    if (!st && pl_json_unpack(answer, "{s:b}", "approved", &approved))
        approved = false;
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text",
                            approved ? "approved" : "refused");
    if (!st)
        st = pl_steps_add_resultf(out, "{s:b}", "approved", approved);
    cJSON_Delete(answer);
    return st;
}

static int await(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(a->payload, "timeout");
    cJSON *got = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "waiting");
    if (!st)
        st = pl_ctx_wait_event(&got, ctx, "go",
                               cJSON_IsNumber(to) ? (int64_t)to->valuedouble
                                                  : PL_WAIT_FOREVER);
    if (st == PL_ECANCELLED) {
        st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "cancelled");
        return st ? st : PL_ECANCELLED;
    }
    if (st == PL_ETIMEDOUT)
        return pl_steps_add_resultf(out, "{s:b}", "timeout", 1);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", got);
    cJSON_Delete(got);
    return st;
}

static int nap(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int64_t ms = 0;
    if (pl_json_unpack(a->payload, "{s:I}", "ms", &ms))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "nap needs {\"ms\": integer}");
    int st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "napping");
    if (!st)
        st = pl_ctx_sleep(ctx, ms);
    if (!st)
        st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "awake");
    return st ? st : pl_steps_add_resultf(out, "{s:I}", "slept", ms);
}

static int gated(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    const char *env = getenv("REPLAY_CODE_VERSION");
    /* 1 or 2; anything else is the old code's 1 */
    int max = env && !strcmp(env, "2") ? 2 : 1, v = 0;
    int st = pl_ctx_version(&v, ctx, "rolling", PL_VERSION_DEFAULT, max);
    cJSON *answer = NULL;
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "human", "{s:s}", "question",
                            "go on?");
    cJSON_Delete(answer);
    return st ? st : pl_steps_add_resultf(out, "{s:i}", "v", v);
}

static int hold(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const char *path = "";
    if (pl_json_unpack(a->payload, "{s:s}", "path", &path) || !*path ||
        strlen(path) > 1000)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "hold needs {\"path\": string}");
    char in[1024];
    snprintf(in, sizeof in, "%s.in", path);
    int fd = open(in, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    while (access(path, F_OK) == 0) {
        struct timespec ts = {0, 5000000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    return pl_steps_add_resultf(out, "{}");
}

static int looper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int left = 0;
    if (pl_json_unpack(a->payload, "{s:i}", "left", &left))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "looper needs {\"left\": number}");
    if (left > 0) {
        cJSON *next = NULL;
        int st = pl_json_pack(&next, "{s:i}", "left", left - 1);
        if (!st)
            st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "left", left);
}

static int extends(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "one");
    if (!st && getenv("REPLAY_EXTEND"))
        st = pl_ctx_invokef(NULL, ctx, "note", "{s:s}", "text", "two");
    (void)out; /* no step of its own: its record ends with its last call */
    return st;
}

int pl_plugin_init(pl_registry *reg)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "approval";
    d.fn = approval;
    d.description = "Ask a human to approve an order (build " BUILD_TAG ").";
    int st = pl_registry_add(reg, &d);
    if (st)
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "note";
    d.fn = note;
    d.description = "Note a line in the effects file.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "await";
    d.fn = await;
    d.description = "Wait for the event \"go\".";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "nap";
    d.fn = nap;
    d.description = "Sleep, between two notes.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "gated";
    d.fn = gated;
    d.description = "A version point, then a human's answer.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "hold";
    d.fn = hold;
    d.description = "Execute while a file exists.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "looper";
    d.fn = looper;
    d.description = "Continue as new until left is 0.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    d = (pl_policy_def)PL_POLICY_DEF_INIT;
    d.name = "extends";
    d.fn = extends;
    d.description = "A note, and a second one under newer code.";
    if ((st = pl_registry_add(reg, &d)))
        return st;
    return pl_registry_add_human(reg, "human");
}
