/*
 * quickstart.c -- the smallest complete policyledger program.
 *
 * A workflow policy calls a tool policy twice.  Every call is recorded in the
 * workflow's ledger; run the program twice and the second run replays the
 * ledger: the tool does not execute again.
 *
 *   quickstart [STORE]     (default: quickstart.db)
 */
#include <stdio.h>

#include <policyledger.h>

/* A tool: {"a": x, "b": y} -> {"sum": x + y}. */
static int add(pl_ctx *ctx, const pl_action *action, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    double a, b;
    if (pl_json_unpack(action->payload, "{s:f, s:f}", "a", &a, "b", &b))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    return pl_steps_add_resultf(out, "{s:f}", "sum", a + b);
}

/* One recorded call to "add": on replay, its result comes from the ledger. */
static int add_call(pl_ctx *ctx, double a, double b, double *sum)
{
    cJSON *r = NULL;
    int st = pl_ctx_invokef(&r, ctx, "add", "{s:f, s:f}", "a", a, "b", b);
    if (!st)
        st = pl_json_unpack(r, "{s:f}", "sum", sum);
    cJSON_Delete(r); /* on PL_ERESULT, r is add's error object */
    return st;
}

/* A workflow: (1 + 2) + 3. */
static int sum3(pl_ctx *ctx, const pl_action *action, pl_steps *out, void *user)
{
    (void)action;
    (void)user;
    double x, y;
    int st = add_call(ctx, 1, 2, &x);
    if (!st)
        st = add_call(ctx, x, 3, &y);
    if (st)
        return st; /* suspended, diverged, add's error, ...: pass it up */
    return pl_steps_add_resultf(out, "{s:f}", "total", y);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [STORE]\n", argv[0]);
        return 2;
    }
    const char *store = argc > 1 ? argv[1] : "quickstart.db";
    pl_registry *reg = NULL;
    pl_engine *engine = NULL;
    pl_outcome *outcome = NULL;
    int st, failed = 1; /* exits 1 unless the run completed */

    if ((st = pl_registry_new(&reg)) ||
        (st = pl_registry_add_fn(reg, "add", add, NULL)) ||
        (st = pl_registry_add_fn(reg, "sum3", sum3, NULL)) ||
        (st = pl_engine_open(&engine, store, reg, NULL)))
        goto done;

    /* Start the run; if it exists already, continue it from its ledger. */
    pl_action root = PL_ACTION_INIT;
    root.policy = "sum3";
    root.payload = pl_json_empty();
    pl_run_options opts = PL_RUN_OPTIONS_INIT;
    opts.run_id = "quickstart";
    opts.if_exists = PL_IF_EXISTS_CONTINUE;
    if ((st = pl_run_start(&outcome, engine, &root, &opts))) /* no outcome */
        goto done;

    /* It ran: the outcome says how it ended (a failure is recorded). */
    if (outcome->status == PL_RUN_COMPLETED) {
        failed = 0;
        char *json = cJSON_PrintUnformatted(pl_outcome_result(outcome));
        printf("completed %s: calls executed %llu, served from the ledger "
               "%llu\n",
               json ? json : "?", (unsigned long long)outcome->calls_executed,
               (unsigned long long)outcome->calls_served);
        cJSON_free(json);
    } else {
        printf("run %s: %s\n", pl_run_status_name(outcome->status),
               outcome->reason ? outcome->reason : "");
    }
done:
    if (st)
        fprintf(stderr, "quickstart: %s (%s)\n", pl_errmsg(),
                pl_status_name(st));
    pl_outcome_free(outcome);
    pl_engine_close(engine);
    pl_registry_free(reg);
    return st || failed;
}
