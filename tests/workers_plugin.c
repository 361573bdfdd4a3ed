/*
 * workers_plugin.c -- the plugin of the multi-host simulation
 * (workers_multihost.py): a job of a few calls, each with a real side
 * effect, a line appended to the file WORK_EFFECTS names.
 *
 *   job   {"job": ID, "calls": N}: calls work N times; returns {"job": ID}
 *   work  {"i": I}: sleeps WORK_MS milliseconds (default 20), appends
 *         "<its idempotency key> <host>" to WORK_EFFECTS, returns {"i": I}.
 *         On the host WORK_HANG_HOST names (PL_WORKER_HOST), call 2 of
 *         every job first creates WORK_EFFECTS.hang and then hangs, before
 *         its effect: a worker stuck until it is killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

PL_PLUGIN_DECLARE;

int pl_plugin_init(pl_registry *reg);

static void nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static long env_ms(const char *name, long dflt)
{
    const char *v = getenv(name);
    char *end;
    long n = v ? strtol(v, &end, 10) : dflt;
    return v && (*end || n < 0) ? dflt : n;
}

static int work(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *effects = getenv("WORK_EFFECTS");
    const char *host = getenv("PL_WORKER_HOST");
    const char *hang = getenv("WORK_HANG_HOST");
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(a->payload, "i");
    if (!effects || !cJSON_IsNumber(i))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "work needs WORK_EFFECTS and a number i");
    if (host && hang && !strcmp(host, hang) && i->valueint == 2) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s.hang", effects);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        for (;;)
            nap(1000);
    }
    nap(env_ms("WORK_MS", 20));
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s\n", pl_ctx_idempotency_key(ctx),
                     host ? host : "-");
    int fd = open(effects, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0 || n <= 0 || write(fd, line, (size_t)n) != n) {
        if (fd >= 0)
            close(fd);
        return PL_EIO;
    }
    close(fd);
    return pl_steps_add_resultf(out, "{s:i}", "i", i->valueint);
}

static int job(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *id;
    int calls;
    if (pl_json_unpack(a->payload, "{s:s, s:i}", "job", &id, "calls", &calls))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "a job needs job and calls");
    for (int k = 0; k < calls; k++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "work", "{s:i}", "i", k);
        cJSON_Delete(r);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:s}", "job", id);
}

int pl_plugin_init(pl_registry *reg)
{
    int st = pl_registry_add_fn(reg, "work", work, NULL);
    return st ? st : pl_registry_add_fn(reg, "job", job, NULL);
}
