/*
 * dump_fixture -- makes the stores ledger-dump's tests read, with the real
 * engine.
 *
 *   dump_fixture STORE build
 *       runs with fixed ids: "r-completed" (nested calls, an error result,
 *       a long payload), "r-failed", "r-suspended" (a human), and
 *       "r-crashed" (a child process SIGKILLs itself inside a call that is
 *       not idempotent, so the call is in doubt and the owner is gone).
 *   dump_fixture STORE slow RUN_ID CALLS DELAY_MS GATE
 *       one run whose root calls "leaf" CALLS times, sleeping DELAY_MS
 *       before each call, and after the first call waiting until the file
 *       GATE exists (at most a minute): a writer another process can
 *       follow, which goes on only when the follower is there.
 *   dump_fixture STORE bursts RUN_ID CALLS PER DELAY_MS GATE
 *       as slow, but sleeping DELAY_MS only before every PER calls: a
 *       long run that grows in bursts while it is followed.
 *   dump_fixture STORE fan RUN_ID DELAY_MS GATE
 *       as slow, but after its first call (and the gate) the root calls
 *       two "ticker"s at once (pl_ctx_call_all()), each calling "leaf" 6
 *       times, one every DELAY_MS and one every 3 * DELAY_MS / 2: their
 *       steps are appended interleaved, not in tree order.
 *   dump_fixture STORE quit ID
 *       one run whose root makes two calls and then SIGKILLs its own
 *       process (so it dies by that signal), in its first second: its
 *       record counts none of its steps, none of them in doubt.
 *   dump_fixture STORE chain ID [forget|expire]
 *       a chain continued as new: "loop" and "loop~1" continued,
 *       "loop~2" queued; then link ID deleted, and with "forget" its
 *       tombstone expired and removed too (kept a millisecond); with
 *       "expire" expired (kept a millisecond) but not removed.
 *   dump_fixture STORE many N
 *       N completed runs of "order", "m-1" to "m-N" (written without
 *       fsync: a test's store).
 *   dump_fixture STORE delete ID...
 *       deletes each run ID (pl_run_delete()), as a retention rule or a
 *       prune in another process would while a reader reads the store.
 *   dump_fixture STORE hostile
 *       runs whose stored strings hold control characters (ESC [, a
 *       carriage return, line feeds, BEL, DEL, a C1 CSI): "h-failed" (its
 *       reason), "h-error" (an error result's code and message),
 *       "h-suspended" (its prompt), "h-cancelled" (its reason) and
 *       "h-waiting" (the event it waits for: a C1 CSI, which names may
 *       hold), all of policy "hostile", whose code version holds ESC [
 *       too.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

static long g_delay_ms;
static const char *g_gate;

static int leaf(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    cJSON *r = cJSON_CreateObject();
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    cJSON_AddNumberToObject(r, "leaf", cJSON_IsNumber(n) ? n->valuedouble : 0);
    int st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int invoke_n(pl_ctx *ctx, const char *policy, int n)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n", n);
    int st = pl_ctx_invoke(NULL, ctx, policy, p);
    cJSON_Delete(p);
    return st;
}

static int mid(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st;
    if ((st = invoke_n(ctx, "leaf", 1)) || (st = invoke_n(ctx, "leaf", 2)))
        return st;
    return pl_steps_add_text(out, NULL, "mid done");
}

static int flaky(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_error(out, PL_ERR_RATE_LIMITED, "try again later");
}

static int order(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = invoke_n(ctx, "mid", 7);
    if (st)
        return st;
    st = invoke_n(ctx, "flaky", 0);
    if (st && st != PL_ERESULT)
        return st;
    char big[301];
    memset(big, 'x', 300);
    big[300] = '\0';
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "done", true);
    cJSON_AddStringToObject(r, "note", big);
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)out;
    (void)user;
    int st = invoke_n(ctx, "leaf", 3);
    return st ? st : pl_errorf(PL_EPOLICY, "the card was declined");
}

/* Ask a human @p question; the answer is the result. */
static int ask(pl_ctx *ctx, pl_steps *out, const char *question)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "question", question);
    cJSON *answer = NULL;
    int st = pl_ctx_invoke(&answer, ctx, "human", p);
    cJSON_Delete(p);
    if (st)
        return st;
    st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int approve(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    return ask(ctx, out, "ship order 42?");
}

static int die(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)out;
    (void)user;
    kill(getpid(), SIGKILL);
    return PL_EPOLICY;
}

static int crasher(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)out;
    (void)user;
    int st = invoke_n(ctx, "leaf", 5);
    return st ? st : invoke_n(ctx, "die", 0);
}

static int quitter(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)out;
    (void)user;
    int st;
    if ((st = invoke_n(ctx, "leaf", 1)) || (st = invoke_n(ctx, "leaf", 2)))
        return st;
    kill(getpid(), SIGKILL);
    return PL_EPOLICY;
}

/* Until the file g_gate exists (at most a minute). */
static int wait_gate(void)
{
    for (int w = 0; access(g_gate, F_OK) != 0; w++) {
        if (w == 3000)
            return pl_errorf(PL_EPOLICY, "no gate file '%s'", g_gate);
        struct timespec t = {0, 20 * 1000000};
        nanosleep(&t, NULL);
    }
    return PL_OK;
}

static int slow(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "calls");
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(a->payload, "per");
    int calls = cJSON_IsNumber(n) ? n->valueint : 0;
    int burst = cJSON_IsNumber(per) && per->valueint > 0 ? per->valueint : 1;
    for (int i = 0; i < calls; i++) {
        struct timespec ts = {g_delay_ms / 1000, (g_delay_ms % 1000) * 1000000};
        if (i % burst == 0)
            nanosleep(&ts, NULL);
        int st = invoke_n(ctx, "leaf", i);
        if (st)
            return st;
        if (i == 0 && (st = wait_gate()))
            return st;
    }
    return pl_steps_add_text(out, NULL, "slow done");
}

/* {"n": N, "ms": MS}: calls "leaf" N times, sleeping MS before each. */
static int ticker(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "n");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    long delay = cJSON_IsNumber(ms) ? (long)ms->valuedouble : 0;
    for (int i = 0; i < (cJSON_IsNumber(n) ? n->valueint : 0); i++) {
        struct timespec ts = {delay / 1000, (delay % 1000) * 1000000};
        nanosleep(&ts, NULL);
        int st = invoke_n(ctx, "leaf", i);
        if (st)
            return st;
    }
    return pl_steps_add_text(out, NULL, "ticked");
}

/* One call, the gate, then two tickers at once (see the header). */
static int fan(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    int st = invoke_n(ctx, "leaf", 0);
    if (!st)
        st = wait_gate();
    cJSON *p[2];
    pl_action act[2] = {PL_ACTION_INIT, PL_ACTION_INIT};
    pl_call_spec calls[2] = {PL_CALL_SPEC_INIT, PL_CALL_SPEC_INIT};
    for (int i = 0; i < 2; i++) {
        p[i] = cJSON_CreateObject();
        cJSON_AddNumberToObject(p[i], "n", 6);
        cJSON_AddNumberToObject(p[i], "ms", (double)(g_delay_ms * (2 + i) / 2));
        act[i].policy = "ticker";
        act[i].payload = p[i];
        calls[i].action = &act[i];
    }
    if (!st)
        st = pl_ctx_call_all(NULL, ctx, calls, 2);
    cJSON_Delete(p[0]);
    cJSON_Delete(p[1]);
    return st ? st : pl_steps_add_text(out, NULL, "fan done");
}

/* {"left": N}: continues as new with N - 1 while N > 0. */
static int looper(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(a->payload, "left");
    int left = cJSON_IsNumber(n) ? n->valueint : 0;
    int st = invoke_n(ctx, "leaf", left);
    if (!st && left > 0) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddNumberToObject(next, "left", left - 1);
        st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
    }
    return st ? st : pl_steps_add_text(out, NULL, "loop done");
}

/* What a hostile string holds: a screen cleared, a line forged, a bell,
 * DEL and a C1 CSI (U+009B). */
#define HOSTILE                                                                \
    "x\x1b[2J\x1b[H\rFAULT run forged: by the store\nok    run forged\x07 "    \
    "\x7f \xc2\x9b"                                                            \
    "31m"

/* An event's name may hold a C1 control (UTF-8, no C0 nor DEL): a CSI
 * that clears the screen. */
#define HOSTILE_EVENT                                                          \
    "go\xc2\x9b"                                                               \
    "2J"

/* {"how": "fail" | "error" | "wait" | "ask"}: fails with HOSTILE as its
 * message, returns an error result holding it, waits for HOSTILE_EVENT,
 * or asks a human it. */
static int hostile(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const char *how = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(a->payload, "how"));
    if (how && !strcmp(how, "wait")) {
        cJSON *got = NULL;
        int st = pl_ctx_wait_event(&got, ctx, HOSTILE_EVENT, PL_WAIT_FOREVER);
        cJSON_Delete(got);
        return st ? st : pl_steps_add_text(out, NULL, "went");
    }
    if (how && !strcmp(how, "fail"))
        return pl_errorf(PL_EPOLICY, "%s", HOSTILE);
    if (how && !strcmp(how, "error"))
        return pl_steps_add_error(out, "E\x1b[31mX", HOSTILE);
    return ask(ctx, out, HOSTILE);
}

/* A policy of code version @p code. */
static int add_coded(pl_registry *reg, const char *name, pl_policy_fn fn,
                     bool idempotent, const char *code)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = fn;
    d.idempotent = idempotent;
    d.in_doubt = PL_IN_DOUBT_FAIL;
    d.code_version = code;
    return pl_registry_add(reg, &d);
}

static int add(pl_registry *reg, const char *name, pl_policy_fn fn,
               bool idempotent)
{
    return add_coded(reg, name, fn, idempotent, "fixture-1");
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg) || add(reg, "leaf", leaf, true) ||
        add(reg, "mid", mid, true) || add(reg, "flaky", flaky, true) ||
        add(reg, "order", order, true) || add(reg, "boom", boom, true) ||
        add(reg, "approve", approve, true) || add(reg, "die", die, false) ||
        add(reg, "crasher", crasher, true) || add(reg, "slow", slow, true) ||
        add(reg, "looper", looper, true) || add(reg, "ticker", ticker, true) ||
        add(reg, "fan", fan, true) || add(reg, "quitter", quitter, true) ||
        /* its code version holds ESC [ too */
        add_coded(reg, "hostile", hostile, true, "fixture\x1b[31m-1") ||
        pl_registry_add_human(reg, "human")) {
        fprintf(stderr, "registry: %s\n", pl_errmsg());
        exit(1);
    }
    return reg;
}

static int start(pl_engine *e, const char *id, const char *policy,
                 const cJSON *payload, pl_run_status want)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = policy;
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &root, &ro);
    if (st || o->status != want) {
        fprintf(stderr, "run %s: %s (status %d)\n", id,
                st ? pl_errmsg() : "unexpected outcome",
                o ? (int)o->status : 0);
        pl_outcome_free(o);
        return 1;
    }
    pl_outcome_free(o);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dump_fixture STORE build | STORE slow ID "
                        "CALLS DELAY_MS GATE | STORE bursts ID CALLS PER "
                        "DELAY_MS GATE\n");
        return 1;
    }
    const char *path = argv[1];
    pl_registry *reg = registry();
    pl_engine *e = NULL;
    int rc = 0;
    bool fanned = !strcmp(argv[2], "fan") && argc == 6;
    bool bursts = !strcmp(argv[2], "bursts") && argc == 8;
    if ((!strcmp(argv[2], "slow") && argc == 7) || fanned || bursts) {
        g_delay_ms = strtol(argv[argc - 2], NULL, 10);
        g_gate = argv[argc - 1];
        if (pl_engine_open(&e, path, reg, NULL)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        cJSON *p = cJSON_CreateObject();
        if (!fanned)
            cJSON_AddNumberToObject(p, "calls", strtol(argv[4], NULL, 10));
        if (bursts)
            cJSON_AddNumberToObject(p, "per", strtol(argv[5], NULL, 10));
        rc = start(e, argv[3], fanned ? "fan" : "slow", p, PL_RUN_COMPLETED);
        cJSON_Delete(p);
        pl_engine_close(e);
        pl_registry_free(reg);
        return rc;
    }
    if (!strcmp(argv[2], "quit") && argc == 4) {
        if (pl_engine_open(&e, path, reg, NULL)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        cJSON *p = cJSON_CreateObject();
        start(e, argv[3], "quitter", p, PL_RUN_COMPLETED);
        cJSON_Delete(p);
        return 3; /* not reached: "quitter" kills the process */
    }
    if (!strcmp(argv[2], "many") && argc == 4) {
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.durability = PL_DURABILITY_PROCESS; /* a test's store: no fsync */
        if (pl_engine_open(&e, path, reg, &eo)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "customer", "ada");
        long n = strtol(argv[3], NULL, 10);
        for (long i = 1; !rc && i <= n; i++) {
            char id[32];
            snprintf(id, sizeof id, "m-%ld", i);
            rc = start(e, id, "order", p, PL_RUN_COMPLETED);
        }
        cJSON_Delete(p);
        pl_engine_close(e);
        pl_registry_free(reg);
        return rc;
    }
    if (!strcmp(argv[2], "chain") && (argc == 4 || argc == 5)) {
        pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
        eo.tombstone_ms = argc == 5 ? 1 : 0;
        if (pl_engine_open(&e, path, reg, &eo)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "left", 2);
        pl_outcome *o = NULL;
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.older_than_ms = 3600 * 1000; /* nothing: tombstones expire */
        struct timespec ms2 = {0, 2 * 1000000};
        uint64_t n = 0;
        rc = start(e, "loop", "looper", p, PL_RUN_CONTINUED);
        if (!rc &&
            (pl_run_continue(&o, e, "loop~1", NULL) ||
             o->status != PL_RUN_CONTINUED || pl_run_delete(e, argv[3]) ||
             (argc == 5 && !strcmp(argv[4], "forget") &&
              (nanosleep(&ms2, NULL) || pl_engine_prune(e, &po, &n))))) {
            fprintf(stderr, "chain: %s\n", pl_errmsg());
            rc = 1;
        }
        pl_outcome_free(o);
        cJSON_Delete(p);
        pl_engine_close(e);
        pl_registry_free(reg);
        return rc;
    }
    if (!strcmp(argv[2], "delete") && argc >= 4) {
        if (pl_engine_open(&e, path, reg, NULL)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        for (int i = 3; !rc && i < argc; i++)
            if (pl_run_delete(e, argv[i])) {
                fprintf(stderr, "delete %s: %s\n", argv[i], pl_errmsg());
                rc = 1;
            }
        pl_engine_close(e);
        pl_registry_free(reg);
        return rc;
    }
    if (!strcmp(argv[2], "hostile") && argc == 3) {
        if (pl_engine_open(&e, path, reg, NULL)) {
            fprintf(stderr, "open: %s\n", pl_errmsg());
            return 1;
        }
        cJSON *p[4] = {cJSON_CreateObject(), cJSON_CreateObject(),
                       cJSON_CreateObject(), cJSON_CreateObject()};
        cJSON_AddStringToObject(p[0], "how", "fail");
        cJSON_AddStringToObject(p[1], "how", "error");
        cJSON_AddStringToObject(p[3], "how", "wait");
        rc = start(e, "h-failed", "hostile", p[0], PL_RUN_FAILED) ||
             start(e, "h-error", "hostile", p[1], PL_RUN_COMPLETED) ||
             start(e, "h-suspended", "hostile", p[2], PL_RUN_SUSPENDED) ||
             start(e, "h-cancelled", "hostile", p[2], PL_RUN_SUSPENDED) ||
             start(e, "h-waiting", "hostile", p[3], PL_RUN_WAITING);
        if (!rc && pl_run_cancel(e, "h-cancelled", HOSTILE)) {
            fprintf(stderr, "cancel: %s\n", pl_errmsg());
            rc = 1;
        }
        for (int i = 0; i < 4; i++)
            cJSON_Delete(p[i]);
        pl_engine_close(e);
        pl_registry_free(reg);
        return rc;
    }
    if (strcmp(argv[2], "build") != 0) {
        fprintf(stderr, "unknown mode '%s'\n", argv[2]);
        return 1;
    }
    if (pl_engine_open(&e, path, reg, NULL)) {
        fprintf(stderr, "open: %s\n", pl_errmsg());
        return 1;
    }
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "customer", "ada");
    rc = start(e, "r-completed", "order", p, PL_RUN_COMPLETED) ||
         start(e, "r-failed", "boom", p, PL_RUN_FAILED) ||
         start(e, "r-suspended", "approve", p, PL_RUN_SUSPENDED);
    pl_engine_close(e); /* a forked child opens its own */
    if (rc) {
        cJSON_Delete(p);
        pl_registry_free(reg);
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, NULL))
            _exit(2);
        start(ce, "r-crashed", "crasher", p, PL_RUN_COMPLETED);
        _exit(3); /* not reached: "die" kills the process */
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFSIGNALED(ws) ||
        WTERMSIG(ws) != SIGKILL) {
        fprintf(stderr, "the crashing child did not die by SIGKILL\n");
        rc = 1;
    }
    cJSON_Delete(p);
    pl_registry_free(reg);
    return rc;
}
