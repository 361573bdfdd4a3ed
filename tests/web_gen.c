/*
 * web_gen -- fill a store with runs for ledger-web's tests and benchmark.
 *
 *   web_gen STORE N            N runs of "noop" (UUIDv7 ids), every tenth
 *                              failed ("boom"), without fsync
 *   web_gen STORE --hostile    runs whose payloads, results, reasons and
 *                              ids carry markup, quotes, script URLs, and
 *                              a 1 MB string
 *   web_gen STORE --long N     run "long-run": N calls of noop, one after
 *                              another (3 steps each, and the result)
 *   web_gen STORE --big MB     run "big-run": a call whose payload and
 *                              result hold a string of MB MiB, among small
 *                              calls
 *   web_gen STORE --search     runs "search-deep" and "search-past": 700
 *                              calls of noop, the 600th (steps 1800 to
 *                              1802) or the 690th (2070 to 2072) with the
 *                              word "deep-marker", which nothing else holds
 *   web_gen STORE --queued N   N runs of "noop" submitted (UUIDv7 ids), left
 *                              in the queue: unfinished, none executed
 *
 * Prints the number of runs it made.  Exit 0, or 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

static int noop(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    const cJSON *echo = cJSON_GetObjectItemCaseSensitive(a->payload, "echo");
    if (cJSON_IsString(echo))
        return pl_steps_add_resultf(out, "{s:s}", "echo", echo->valuestring);
    return pl_steps_add_resultf(out, "{s:b}", "ok", 1);
}

static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)out;
    (void)user;
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(a->payload, "why");
    return pl_errorf(PL_EINVAL, "%s",
                     cJSON_IsString(why) ? why->valuestring : "boom");
}

/* {"n": N, "big": MiB}: N small calls, and half way one with a payload
 * of MiB MiB (if any). */
static int many(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    const cJSON *big = cJSON_GetObjectItemCaseSensitive(a->payload, "big");
    long calls = cJSON_IsNumber(n) ? (long)n->valuedouble : 0;
    for (long i = 0; i < calls; i++) {
        cJSON *r = NULL;
        int st = pl_ctx_invokef(&r, ctx, "noop", "{s:i}", "i", (int)i);
        cJSON_Delete(r);
        if (st)
            return st;
        if (i == calls / 2 && cJSON_IsNumber(big) && big->valuedouble > 0) {
            size_t len = (size_t)big->valuedouble << 20;
            char *s = malloc(len + 1);
            if (!s)
                return PL_ENOMEM;
            for (size_t k = 0; k < len; k++)
                s[k] = "0123456789abcdef<>&\""[k % 20];
            s[len] = '\0';
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "echo", s);
            free(s);
            st = pl_ctx_invoke(&r, ctx, "noop", p);
            cJSON_Delete(p);
            cJSON_Delete(r);
            if (st)
                return st;
        }
    }
    return pl_steps_add_resultf(out, "{s:i}", "calls", (int)calls);
}

/* {"n": N, "at": K}: N calls of noop, the K-th's payload (and result)
 * holding "deep-marker". */
static int seek(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(a->payload, "at");
    int calls = cJSON_IsNumber(n) ? n->valueint : 0;
    for (int i = 0; i < calls; i++) {
        cJSON *r = NULL;
        int st = cJSON_IsNumber(at) && i == at->valueint
                     ? pl_ctx_invokef(&r, ctx, "noop", "{s:s}", "echo",
                                      "a deep-marker in a step")
                     : pl_ctx_invokef(&r, ctx, "noop", "{s:i}", "i", i);
        cJSON_Delete(r);
        if (st)
            return st;
    }
    return pl_steps_add_resultf(out, "{s:i}", "calls", calls);
}

static int start(pl_engine *e, const char *policy, cJSON *payload,
                 const char *id)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &root, &ro);
    pl_outcome_free(o);
    cJSON_Delete(payload);
    if (st)
        fprintf(stderr, "web_gen: %s\n", pl_errmsg());
    return st;
}

static const char *const hostile[] = {
    "<script>alert(1)</script>",
    "\"onerror=alert(1) x=\"",
    "javascript:alert(document.cookie)",
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>\u2028\u2029\\\"'`${x}",
};

int main(int argc, char **argv)
{
    bool pair = argc == 4 &&
                (!strcmp(argv[2], "--long") || !strcmp(argv[2], "--big"));
    bool queued = argc == 4 && !strcmp(argv[2], "--queued");
    if (argc != 3 && !pair && !queued) {
        fprintf(stderr, "usage: web_gen STORE N | web_gen STORE --hostile | "
                        "web_gen STORE --long N | web_gen STORE --big MB | "
                        "web_gen STORE --search | web_gen STORE --queued N\n");
        return 1;
    }
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.map_size_max = 0;
    int st = pl_registry_new(&reg);
    if (!st)
        st = pl_registry_add_fn(reg, "noop", noop, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "boom", boom, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "many", many, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "seek", seek, NULL);
    if (!st)
        st = pl_engine_open(&e, argv[1], reg, &eo);
    if (st) {
        fprintf(stderr, "web_gen: %s\n", pl_errmsg());
        pl_registry_free(reg);
        return 1;
    }
    long made = 0;
    if (queued) {
        long n = strtol(argv[3], NULL, 10);
        pl_action root = PL_ACTION_INIT;
        root.policy = "noop";
        for (; !st && made < n; made++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "i", (double)made);
            root.payload = p;
            char *id = NULL;
            st = p ? pl_run_submit(&id, e, &root, NULL) : PL_ENOMEM;
            free(id);
            cJSON_Delete(p);
            if (st)
                fprintf(stderr, "web_gen: %s\n", pl_errmsg());
        }
    } else if (pair) {
        long v = strtol(argv[3], NULL, 10);
        bool big = !strcmp(argv[2], "--big");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "n", big ? 40 : (double)v);
        cJSON_AddNumberToObject(p, "big", big ? (double)v : 0);
        st = start(e, "many", p, big ? "big-run" : "long-run");
        made++;
    } else if (!strcmp(argv[2], "--search")) {
        static const struct {
            const char *id;
            int at;
        } runs[] = {{"search-deep", 600}, {"search-past", 690}};
        for (size_t i = 0; !st && i < 2; i++, made++) {
            cJSON *p = NULL;
            st = pl_json_pack(&p, "{s:i, s:i}", "n", 700, "at", runs[i].at);
            if (!st)
                st = start(e, "seek", p, runs[i].id);
        }
    } else if (!strcmp(argv[2], "--hostile")) {
        size_t n = sizeof hostile / sizeof hostile[0];
        for (size_t i = 0; !st && i < n; i++) {
            char id[64];
            snprintf(id, sizeof id, "hostile-%zu", i);
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "echo", hostile[i]);
            cJSON_AddStringToObject(p, "why", hostile[i]);
            st = start(e, i % 2 ? "boom" : "noop", p, id);
            made++;
        }
        /* a 1 MB string */
        size_t big = (size_t)1 << 20;
        char *s = malloc(big + 1);
        if (!st && s) {
            for (size_t i = 0; i < big; i++)
                s[i] = "<script>\"&'"[i % 11];
            s[big] = '\0';
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "echo", s);
            st = start(e, "noop", p, "hostile-big");
            made++;
        }
        free(s);
        /* ids as hostile as an id may be */
        const char *ids[] = {"-.:", "..", "a:b:c-.-"};
        for (size_t i = 0; !st && i < 3; i++, made++)
            st = start(e, "noop", cJSON_CreateObject(), ids[i]);
    } else {
        char *end;
        long n = strtol(argv[2], &end, 10);
        if (*end || n < 0) {
            fprintf(stderr, "web_gen: N must be a count\n");
            st = PL_EINVAL;
        }
        for (long i = 0; !st && i < n; i++, made++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "i", (double)i);
            st = start(e, i % 10 == 9 ? "boom" : "noop", p, NULL);
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    if (st)
        return 1;
    printf("%ld\n", made);
    return 0;
}
