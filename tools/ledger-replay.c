/*
 * ledger-replay -- finish, resume, check and fork the runs of a store, with
 * the policies of the plugins given.
 *
 *   ledger-replay STORE --plugin LIB.so [--plugin LIB.so ...] MODE [--json]
 *
 * Everything it does goes through the public API: a run is finished by
 * continuing it (pl_run_continue), resumed with pl_run_resume, checked
 * with pl_run_options.check (every result served, nothing written; the
 * first divergence arrives as PL_EVENT_DIVERGED), forked with pl_run_fork,
 * and an exported run is imported with pl_run_import.  `ledger-replay --help` is the manual.
 *
 * Exit codes:
 *   0  every run completed (--check: every run replays cleanly)
 *   1  bad usage, or a request the run's state refuses (resume a run that
 *      is not suspended, a wrong token, fork at a step that is not there,
 *      touch a run a live process owns)
 *   2  the store or a plugin cannot be opened, or the run does not exist
 *   4  a run ended suspended (and none failed)
 *   5  a run failed or diverged, or an export to import was changed
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define EXIT_USAGE CLI_EXIT_USAGE
#define EXIT_OPEN CLI_EXIT_STORE
#define EXIT_SUSPENDED 4
#define EXIT_FAILED 5

/* The largest --answer read from a file or stdin. */
#define ANSWER_MAX ((size_t)16 << 20)

/* ---- command-line helpers ---------------------------------------------- */

static double now_ms(void) { return (double)cli_now_us() / 1e3; }

/* ---- options ------------------------------------------------------------ */

enum mode {
    MODE_NONE,
    MODE_RUN,
    MODE_ALL,
    MODE_RESUME,
    MODE_CHECK,
    MODE_FORK,
    MODE_IMPORT,
    MODE_WORKER,
    MODE_SUBMIT,
    MODE_SIGNAL,
    MODE_CANCEL,
    MODE_WAKE
};

typedef struct options {
    const char *store;
    const char **plugins;
    size_t n_plugins;
    enum mode mode;
    const char *run;    /* --run, --resume, --fork */
    const char *answer; /* --answer */
    const char *token;  /* --token */
    const char *at;     /* --at */
    const char *new_id; /* --new-id */
    const char *import; /* --import FILE */
    const char *trace;  /* --trace FILE */
    const char *otel;   /* --otel URL */
    bool json;
    /* the queue: --worker, --submit */
    unsigned concurrency; /* --concurrency N */
    unsigned lease_ms;    /* --lease-ms MS */
    const char *submit;   /* --submit POLICY */
    const char *payload;  /* --payload JSON */
    /* time: --signal, --cancel */
    const char *name;   /* --name EVENT */
    const char *reason; /* --reason TEXT */
} options;

static void usage(FILE *f)
{
    fputs(
        "usage: ledger-replay STORE --plugin LIB.so [--plugin LIB.so ...] "
        "MODE [--json]\n"
        "\n"
        "Finish, resume, check and fork the runs of a policyledger store, "
        "replaying\n"
        "their ledgers with the policies the plugins register.  A result "
        "that is\n"
        "in a ledger is served from it, never executed again.\n"
        "\n"
        "MODE is one of:\n"
        "  --run ID              continue run ID to its end (or its next "
        "suspension)\n"
        "  --all                 continue every run that is `running` but "
        "whose process\n"
        "                        is gone (crashed); runs a live process owns "
        "are skipped\n"
        "  --resume ID --answer JSON [--token T]\n"
        "                        answer a suspended run and continue it.  "
        "JSON is an\n"
        "                        object, or @FILE to read it from a file, or "
        "- for stdin.\n"
        "                        Without --token, the run's current token "
        "is used.\n"
        "  --check [--run ID]    replay every run (or run ID) with every "
        "result served\n"
        "                        from its ledger and nothing executed or "
        "written; report\n"
        "                        `ok` or the first divergence, with the code "
        "that recorded\n"
        "                        the step and the code loaded now.  The "
        "deploy-safety check.\n"
        "  --fork ID --at STEP [--new-id NEW]\n"
        "                        make a new run from run ID's ledgers before "
        "root step\n"
        "                        STEP (\"0:<seq>\", as ledger-dump shows it) "
        "and continue\n"
        "                        it with the loaded code; run ID is not "
        "changed\n"
        "  --signal ID --name EVENT --payload JSON\n"
        "                        send the event EVENT to run ID (durable in "
        "its inbox);\n"
        "                        with --plugin, a run waiting for it is "
        "continued here\n"
        "  --cancel ID [--reason TEXT]\n"
        "                        cancel run ID: a waiting run is continued "
        "at once (its\n"
        "                        wait returns PL_ECANCELLED), a running one "
        "sees it at its\n"
        "                        next call, a suspended one ends now\n"
        "  --wake                continue every waiting run whose time has "
        "come, once;\n"
        "                        print when the next one is due (--worker "
        "wakes them as\n"
        "                        they come due)\n"
        "  --import FILE [--new-id NEW]\n"
        "                        load a run exported by `ledger-dump STORE "
        "--run ID\n"
        "                        --format jsonl` (FILE, or - for stdin) into "
        "STORE,\n"
        "                        created if need be; every hash is checked "
        "first and a\n"
        "                        changed export is refused, naming the step, "
        "with\n"
        "                        nothing written.  Needs no --plugin.\n"
        "  --worker [--concurrency N] [--lease-ms MS]\n"
        "                        be a worker: take submitted runs, and runs "
        "whose worker\n"
        "                        died (lease expired), and execute them, N at "
        "a time\n"
        "                        (default 1), until SIGINT or SIGTERM; then "
        "let the\n"
        "                        calls under way finish, hand their runs back "
        "to the\n"
        "                        queue, and exit 0.  Any number of "
        "workers, on\n"
        "                        any hosts, may share a store (PostgreSQL), "
        "or the\n"
        "                        processes of one host (LMDB); give each host "
        "its own\n"
        "                        PL_WORKER_HOST.  MS: a lease's length "
        "(default 30000,\n"
        "                        at least 100); a dead worker's runs are "
        "taken once it\n"
        "                        has run out\n"
        "  --submit POLICY --payload JSON [--new-id ID]\n"
        "                        queue a run of POLICY for a worker, without "
        "executing\n"
        "                        it (the store is created if need be); prints "
        "its id\n"
        "\n"
        "Options:\n"
        "  --plugin LIB.so       load a plugin's policies (repeatable; at "
        "least one but\n"
        "                        for --import)\n"
        "  --json                print the summaries as one JSON document on "
        "stdout\n"
        "  --trace FILE          append one JSON line per engine event to FILE "
        "(- for\n"
        "                        stderr), flushed per line: trace_id (the run "
        "id), event,\n"
        "                        path, policy, outcome (served or executed), "
        "elapsed_ns\n"
        "  --otel URL            send spans (a run's and each call's) to an "
        "OpenTelemetry\n"
        "                        collector as OTLP/HTTP JSON (URL/v1/traces); "
        "without it,\n"
        "                        OTEL_EXPORTER_OTLP_ENDPOINT (or "
        "..._TRACES_ENDPOINT) turns\n"
        "                        it on.  OTEL_EXPORTER_OTLP_HEADERS adds "
        "headers.  A\n"
        "                        collector that is down never fails a run\n"
        "  --help                this text\n"
        "\n"
        "Every run ends with a summary: its status, the calls served from the "
        "ledger,\n"
        "the calls executed, and the time it took.\n"
        "\n"
        "Exit status:\n"
        "  0  every run completed (--check: every run replays cleanly)\n"
        "  1  bad usage, or a request the run's state refuses (resuming a run "
        "that is\n"
        "     not suspended, a wrong token, a fork step that is not there, a "
        "run that a\n"
        "     live process owns)\n"
        "  2  the store or a plugin cannot be opened, or the run does not "
        "exist\n"
        "  4  a run ended suspended (none failed)\n"
        "  5  a run failed, or (--check) diverged, or (--import) the export "
        "was changed\n"
        "\n"
        "Examples:\n"
        "  # the order service crashed: finish every run it left behind\n"
        "  ledger-replay orders.db --plugin ./order_plugin.so --all\n"
        "\n"
        "  # finish one run, and show what it cost\n"
        "  ledger-replay orders.db --plugin ./order_plugin.so --run "
        "order-A-1001\n"
        "\n"
        "  # a human approved the refund the run is waiting for\n"
        "  ledger-replay orders.db --plugin ./refunds.so --resume r-17 "
        "--answer '{\"approved\": true}'\n"
        "\n"
        "  # before deploying a new build: does it still replay every run?\n"
        "  ledger-replay orders.db --plugin ./build/new/order_plugin.so "
        "--check --json\n"
        "\n"
        "  # three hosts drain one queue; one submits\n"
        "  ledger-replay postgresql://db/orders --plugin ./order_plugin.so "
        "--submit order \\\n"
        "      --payload '{\"order_id\": \"A-1\", \"items\": [], "
        "\"amount_cents\": 100}'\n"
        "  PL_WORKER_HOST=web-2 ledger-replay postgresql://db/orders "
        "--plugin \\\n"
        "      ./order_plugin.so --worker --concurrency 8\n"
        "\n"
        "  # re-run order-A-1001 from its third step with today's code\n"
        "  ledger-replay orders.db --plugin ./order_plugin.so --fork "
        "order-A-1001 --at 0:2\n",
        f);
}

/* A count for --concurrency (1..256) or --lease-ms (100..86400000). */
static int parse_count(unsigned *out, const char *flag, const char *v,
                       unsigned long lo, unsigned long hi)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || n < lo || n > hi) {
        cli_error("%s needs a whole number from %lu to %lu, not '%s'", flag, lo,
                  hi, v);
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

static int set_mode(options *o, enum mode m, const char *flag);

static bool is_queue_flag(const char *a)
{
    return !strcmp(a, "--concurrency") || !strcmp(a, "--lease-ms") ||
           !strcmp(a, "--submit") || !strcmp(a, "--payload");
}

/* The valued flags of --worker and --submit; -1 after a usage error. */
static int parse_queue_flag(options *o, const char *a, const char *v)
{
    if (!strcmp(a, "--concurrency"))
        return parse_count(&o->concurrency, a, v, 1, 256);
    if (!strcmp(a, "--lease-ms"))
        return parse_count(&o->lease_ms, a, v, 100, 86400000);
    if (!strcmp(a, "--submit")) {
        o->submit = v;
        return set_mode(o, MODE_SUBMIT, a);
    }
    if (!strcmp(a, "--payload"))
        o->payload = v;
    return 0;
}

static int set_mode(options *o, enum mode m, const char *flag)
{
    if (o->mode != MODE_NONE && o->mode != m) {
        cli_error("%s cannot be combined with another mode (--run, --all, "
                  "--resume, --check, --fork, --import, --worker, --submit, "
                  "--signal, --cancel, --wake: pick one)",
                  flag);
        return -1;
    }
    o->mode = m;
    return 0;
}

/* Parse argv into @p o; 0, or an exit status (-1 for --help: exit 0). */
static int parse_args(options *o, int argc, char **argv)
{
    bool check = false, run_flag = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--all")) {
            if (set_mode(o, MODE_ALL, a))
                return EXIT_USAGE;
            continue;
        }
        if (!strcmp(a, "--check")) {
            check = true;
            continue;
        }
        if (!strcmp(a, "--worker")) {
            if (set_mode(o, MODE_WORKER, a))
                return EXIT_USAGE;
            continue;
        }
        if (!strcmp(a, "--wake")) {
            if (set_mode(o, MODE_WAKE, a))
                return EXIT_USAGE;
            continue;
        }
        if (a[0] != '-' || !strcmp(a, "-")) {
            if (o->store) {
                cli_error("unexpected argument '%s' (the store is '%s')", a,
                          o->store);
                return EXIT_USAGE;
            }
            o->store = a;
            continue;
        }
        if (is_queue_flag(a)) {
            if (!v) {
                cli_error("%s needs a value", a);
                return EXIT_USAGE;
            }
            i++;
            if (parse_queue_flag(o, a, v))
                return EXIT_USAGE;
            continue;
        }
        static const char *const valued[] = {
            "--plugin", "--run",    "--resume", "--answer", "--token",
            "--fork",   "--at",     "--new-id", "--import", "--trace",
            "--otel",   "--signal", "--cancel", "--name",   "--reason"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known = known || !strcmp(a, valued[k]);
        if (!known) {
            cli_error("unknown option '%s' (see --help)", a);
            return EXIT_USAGE;
        }
        if (!v) {
            cli_error("%s needs a value", a);
            return EXIT_USAGE;
        }
        i++;
        if (!strcmp(a, "--plugin")) {
            const char **grown = realloc(o->plugins,
                                         (o->n_plugins + 1) * sizeof *grown);
            if (!grown) {
                cli_error("out of memory");
                return EXIT_USAGE;
            }
            o->plugins = grown;
            o->plugins[o->n_plugins++] = v;
        } else if (!strcmp(a, "--run")) {
            run_flag = true;
            o->run = v;
        } else if (!strcmp(a, "--resume")) {
            if (set_mode(o, MODE_RESUME, a))
                return EXIT_USAGE;
            o->run = v;
        } else if (!strcmp(a, "--fork")) {
            if (set_mode(o, MODE_FORK, a))
                return EXIT_USAGE;
            o->run = v;
        } else if (!strcmp(a, "--answer")) {
            o->answer = v;
        } else if (!strcmp(a, "--token")) {
            o->token = v;
        } else if (!strcmp(a, "--at")) {
            o->at = v;
        } else if (!strcmp(a, "--new-id")) {
            o->new_id = v;
        } else if (!strcmp(a, "--import")) {
            if (set_mode(o, MODE_IMPORT, a))
                return EXIT_USAGE;
            o->import = v;
        } else if (!strcmp(a, "--trace")) {
            o->trace = v;
        } else if (!strcmp(a, "--otel")) {
            o->otel = v;
        } else if (!strcmp(a, "--signal") || !strcmp(a, "--cancel")) {
            if (set_mode(o, a[2] == 's' ? MODE_SIGNAL : MODE_CANCEL, a))
                return EXIT_USAGE;
            o->run = v;
        } else if (!strcmp(a, "--name")) {
            o->name = v;
        } else if (!strcmp(a, "--reason")) {
            o->reason = v;
        }
    }
    if (check && set_mode(o, MODE_CHECK, "--check"))
        return EXIT_USAGE;
    if (run_flag && o->mode != MODE_CHECK && set_mode(o, MODE_RUN, "--run"))
        return EXIT_USAGE;
    if (!o->store) {
        cli_error("no store given (see --help)");
        return EXIT_USAGE;
    }
    if (!o->n_plugins && o->mode != MODE_IMPORT && o->mode != MODE_SIGNAL &&
        o->mode != MODE_CANCEL) {
        cli_error("no --plugin given: the policies to replay with come from "
                  "plugins");
        return EXIT_USAGE;
    }
    if (o->mode == MODE_NONE) {
        cli_error("nothing to do: give --run ID, --all, --resume ID, --check "
                  "or --fork ID (see --help)");
        return EXIT_USAGE;
    }
    if ((o->answer || o->token) && o->mode != MODE_RESUME) {
        cli_error("--answer and --token go with --resume");
        return EXIT_USAGE;
    }
    if (o->mode == MODE_RESUME && !o->answer) {
        cli_error("--resume needs --answer JSON (or @FILE, or - for stdin)");
        return EXIT_USAGE;
    }
    if (o->new_id && o->mode != MODE_FORK && o->mode != MODE_IMPORT &&
        o->mode != MODE_SUBMIT) {
        cli_error("--new-id goes with --fork, --import or --submit");
        return EXIT_USAGE;
    }
    if ((o->concurrency || o->lease_ms) && o->mode != MODE_WORKER) {
        cli_error("--concurrency and --lease-ms go with --worker");
        return EXIT_USAGE;
    }
    bool wants_payload = o->mode == MODE_SUBMIT || o->mode == MODE_SIGNAL;
    if (!o->payload != !wants_payload) {
        cli_error(o->payload ? "--payload goes with --submit or --signal"
                  : o->mode == MODE_SIGNAL ? "--signal needs --payload JSON"
                                           : "--submit needs --payload JSON");
        return EXIT_USAGE;
    }
    if (!o->name != (o->mode != MODE_SIGNAL)) {
        cli_error(o->name ? "--name goes with --signal"
                          : "--signal needs --name EVENT");
        return EXIT_USAGE;
    }
    if (o->reason && o->mode != MODE_CANCEL) {
        cli_error("--reason goes with --cancel");
        return EXIT_USAGE;
    }
    if (o->at && o->mode != MODE_FORK) {
        cli_error("--at goes with --fork");
        return EXIT_USAGE;
    }
    if (o->mode == MODE_FORK && !o->at) {
        cli_error("--fork needs --at STEP (a root step id such as 0:2)");
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- what replay reports through events --------------------------------- */

/* A change of code seen while replaying, once per pair of identities. */
typedef struct code_change {
    char *step_id; /* the first step it was seen at */
    char *recorded, *now;
    unsigned count;
} code_change;

/* The first divergence of a run, copied out of its event. */
typedef struct divergence {
    bool seen;
    char *step_id, *path;
    uint32_t seq;
    pl_step_type rec_type, new_type;
    char *rec_actor, *rec_payload, *rec_code;
    char *new_actor, *new_payload, *new_code;
} divergence;

typedef struct watch {
    code_change *changes;
    size_t n_changes;
    divergence div;
    bool oom;
    pl_trace *trace; /* --trace */
    pl_otel *otel;   /* --otel */
} watch;

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    else
        *oom = true;
    return d;
}

static bool same_str(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) == 0 : a == b;
}

static void watch_clear(watch *w)
{
    for (size_t i = 0; i < w->n_changes; i++) {
        free(w->changes[i].step_id);
        free(w->changes[i].recorded);
        free(w->changes[i].now);
    }
    free(w->changes);
    divergence *d = &w->div;
    free(d->step_id);
    free(d->path);
    free(d->rec_actor);
    free(d->rec_payload);
    free(d->rec_code);
    free(d->new_actor);
    free(d->new_payload);
    free(d->new_code);
    memset(w, 0, sizeof *w);
}

static void on_event(const pl_event *ev, void *user)
{
    watch *w = user;
    if (w && w->trace)
        pl_trace_event(ev, w->trace);
    if (w && w->otel)
        pl_otel_event(ev, w->otel);
    if (!w || !ev->diff)
        return;
    const pl_replay_diff *df = ev->diff;
    if (ev->kind == PL_EVENT_CODE_CHANGED) {
        for (size_t i = 0; i < w->n_changes; i++) {
            code_change *c = &w->changes[i];
            if (same_str(c->recorded, df->recorded_code) &&
                same_str(c->now, df->new_code)) {
                c->count++;
                return;
            }
        }
        code_change *grown = realloc(w->changes,
                                     (w->n_changes + 1) * sizeof *grown);
        if (!grown) {
            w->oom = true;
            return;
        }
        w->changes = grown;
        code_change *c = &w->changes[w->n_changes++];
        c->step_id = dup_or_null(df->step_id, &w->oom);
        c->recorded = dup_or_null(df->recorded_code, &w->oom);
        c->now = dup_or_null(df->new_code, &w->oom);
        c->count = 1;
    } else if (ev->kind == PL_EVENT_DIVERGED && !w->div.seen) {
        divergence *d = &w->div;
        d->seen = true;
        d->step_id = dup_or_null(df->step_id, &w->oom);
        d->path = dup_or_null(ev->path, &w->oom);
        d->seq = ev->seq;
        d->rec_type = df->recorded_type;
        d->new_type = df->new_type;
        d->rec_actor = dup_or_null(df->recorded_actor, &w->oom);
        d->rec_payload = dup_or_null(df->recorded_payload, &w->oom);
        d->rec_code = dup_or_null(df->recorded_code, &w->oom);
        d->new_actor = dup_or_null(df->new_actor, &w->oom);
        d->new_payload = dup_or_null(df->new_payload, &w->oom);
        d->new_code = dup_or_null(df->new_code, &w->oom);
    }
}

/* ---- reporting ------------------------------------------------------------ */

typedef struct tool {
    options opt;
    pl_registry *reg;
    pl_engine *engine;
    watch w;
    cJSON *runs;    /* --json: one summary per run */
    cJSON *skipped; /* --json: runs --all left alone */
    int exit;       /* the worst so far */
    unsigned n_ok, n_suspended, n_failed, n_diverged, n_skipped;
} tool;

/* Raise the exit status: failures outrank suspensions outrank success. */
static void worst(tool *t, int code)
{
    static const int rank[] = {[0] = 0,
                               [EXIT_SUSPENDED] = 1,
                               [EXIT_FAILED] = 2,
                               [EXIT_OPEN] = 3,
                               [EXIT_USAGE] = 4};
    if (rank[code] > rank[t->exit])
        t->exit = code;
}

static cJSON *json_str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static const char *or_dash(const char *s) { return s ? s : "-"; }

/* The JSON object for one run, added to t->runs (NULL without --json). */
static cJSON *json_run(tool *t, const char *id)
{
    if (!t->opt.json)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "run_id", id);
        cJSON_AddItemToArray(t->runs, o);
    }
    return o;
}

static void json_counters(cJSON *j, const pl_outcome *o, double ms)
{
    cJSON_AddNumberToObject(j, "calls_served", (double)o->calls_served);
    cJSON_AddNumberToObject(j, "calls_executed", (double)o->calls_executed);
    cJSON_AddNumberToObject(j, "steps_replayed", (double)o->steps_replayed);
    cJSON_AddNumberToObject(j, "steps_appended", (double)o->steps_appended);
    cJSON_AddNumberToObject(j, "elapsed_ms", ms);
}

/* Report a run's outcome, and fold it into the exit status. */
static void report_outcome(tool *t, const pl_outcome *o, double ms,
                           const char *note)
{
    cJSON *j = json_run(t, o->run_id);
    const char *status = pl_run_status_name(o->status);
    if (j) {
        cJSON_AddStringToObject(j, "status", status);
        if (note)
            cJSON_AddStringToObject(j, "note", note);
        json_counters(j, o, ms);
    }
    if (!t->opt.json)
        printf("run %s: %s%s%s\n  calls served from the ledger %llu, "
               "executed %llu; %.2f ms\n",
               o->run_id, status, note ? " " : "", note ? note : "",
               (unsigned long long)o->calls_served,
               (unsigned long long)o->calls_executed, ms);
    switch (o->status) {
    case PL_RUN_COMPLETED: {
        size_t n = pl_steps_count(o->steps);
        const pl_step *last = n ? pl_steps_at(o->steps, n - 1) : NULL;
        const cJSON *res = last ? pl_step_payload(last) : NULL;
        if (j && res)
            cJSON_AddItemToObject(j, "result", cJSON_Duplicate(res, true));
        if (!t->opt.json && res) {
            char *text = cJSON_PrintUnformatted(res);
            printf("  result %s\n", text ? text : "?");
            free(text);
        }
        t->n_ok++;
        break;
    }
    case PL_RUN_SUSPENDED: {
        if (j) {
            cJSON_AddStringToObject(j, "suspended_path",
                                    or_dash(o->suspended_path));
            cJSON_AddStringToObject(j, "resume_token",
                                    or_dash(o->resume_token));
            if (o->prompt)
                cJSON_AddItemToObject(j, "prompt",
                                      cJSON_Duplicate(o->prompt, true));
        }
        if (!t->opt.json) {
            char *text = o->prompt ? cJSON_PrintUnformatted(o->prompt) : NULL;
            printf("  waiting at %s for an answer to %s\n  resume with: "
                   "--resume %s --answer JSON\n",
                   or_dash(o->suspended_path), text ? text : "{}", o->run_id);
            free(text);
        }
        t->n_suspended++;
        worst(t, EXIT_SUSPENDED);
        break;
    }
    case PL_RUN_WAITING: {
        char what[PL_MAX_NAME + 96];
        cli_wait_text(what, sizeof what, o->wake_ms, o->wait_event,
                      cli_now_us());
        if (j) {
            cJSON_AddStringToObject(j, "waiting_path",
                                    or_dash(o->suspended_path));
            cJSON_AddNumberToObject(j, "wake_ms", (double)o->wake_ms);
            if (o->wait_event)
                cJSON_AddStringToObject(j, "wait_event", o->wait_event);
        }
        if (!t->opt.json)
            printf("  waiting at %s %s\n", or_dash(o->suspended_path), what);
        t->n_suspended++;
        worst(t, EXIT_SUSPENDED);
        break;
    }
    default:
        if (j) {
            cJSON_AddStringToObject(j, "error", pl_status_name(o->error));
            cJSON_AddStringToObject(j, "reason", or_dash(o->reason));
        }
        if (!t->opt.json)
            printf("  reason: %s\n", or_dash(o->reason));
        t->n_failed++;
        worst(t, EXIT_FAILED);
        break;
    }
}

/* A run that could not be executed at all: say why, and fold it in. */
static void report_refused(tool *t, const char *id, int st, int code)
{
    cli_error("run %s: %s (%s)", id, pl_errmsg(), pl_status_name(st));
    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddStringToObject(j, "status", "not_run");
        cJSON_AddStringToObject(j, "error", pl_status_name(st));
        cJSON_AddStringToObject(j, "message", pl_errmsg());
    }
    if (code == EXIT_FAILED)
        t->n_failed++;
    worst(t, code);
}

/* The exit status for a run the engine refused to execute. */
static int refused_code(int st)
{
    switch (st) {
    case PL_ENOTFOUND: return EXIT_OPEN; /* no such run, root not loaded */
    case PL_EBUSY:
    case PL_ESTATE:
    case PL_ETOKEN:
    case PL_EINVAL: return EXIT_USAGE;
    default: return EXIT_FAILED;
    }
}

/* The exit status when writing to the store failed: the store's fault (it
 * cannot be written: full, read-only, failing, out of memory), or else the
 * request's. */
static int write_code(int st)
{
    switch (st) {
    case PL_ESTORE:
    case PL_EMAPFULL:
    case PL_ENOMEM:
    case PL_EIO:
    case PL_ENOSPC:
    case PL_EACCES: return EXIT_OPEN;
    default: return EXIT_USAGE;
    }
}

/* ---- modes ------------------------------------------------------------------ */

/* Continue one run and report it.  @p note goes into the summary. */
static void continue_one(tool *t, const char *id, const char *note)
{
    pl_run_info *owner = NULL;
    if (!pl_run_get(&owner, t->engine, id) && owner->owner_alive) {
        cli_error("run %s is running in live process %lld on %s: not touched",
                  id, (long long)owner->owner_pid, or_dash(owner->owner_host));
        cJSON *j = json_run(t, id);
        if (j) {
            cJSON_AddStringToObject(j, "status", "not_run");
            cJSON_AddStringToObject(j, "error", "PL_EBUSY");
        }
        worst(t, EXIT_USAGE);
        pl_run_info_free(owner);
        return;
    }
    pl_run_info_free(owner);
    pl_outcome *o = NULL;
    double t0 = now_ms();
    int st = pl_run_continue(&o, t->engine, id, NULL);
    double ms = now_ms() - t0;
    if (st == PL_ESTATE) {
        /* suspended: there is nothing to continue until it is answered */
        pl_run_info *info = NULL;
        if (!pl_run_get(&info, t->engine, id) &&
            info->status == PL_RUN_SUSPENDED) {
            cli_error("run %s is suspended at %s: answer it with --resume %s "
                      "--answer JSON",
                      id, or_dash(info->suspended_path), id);
            cJSON *j = json_run(t, id);
            if (j) {
                cJSON_AddStringToObject(j, "status", "suspended");
                cJSON_AddStringToObject(j, "suspended_path",
                                        or_dash(info->suspended_path));
                cJSON_AddStringToObject(j, "resume_token",
                                        or_dash(info->resume_token));
            }
            t->n_suspended++;
            worst(t, EXIT_SUSPENDED);
            pl_run_info_free(info);
            return;
        }
        pl_run_info_free(info);
    }
    if (st) {
        report_refused(t, id, st, refused_code(st));
        return;
    }
    report_outcome(t, o, ms, note);
    pl_outcome_free(o);
}

/* A run must exist before anything is done to it: exit 2 if not. */
static int need_run(tool *t, const char *id)
{
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, t->engine, id);
    pl_run_info_free(info);
    if (st == PL_ENOTFOUND || st == PL_EINVAL) {
        cli_error("no run '%s' in %s", id, t->opt.store);
        worst(t, EXIT_OPEN);
        return -1;
    }
    if (st) {
        cli_error("run %s: %s (%s)", id, pl_errmsg(), pl_status_name(st));
        worst(t, EXIT_OPEN);
        return -1;
    }
    return 0;
}

typedef struct id_list {
    char **v;
    size_t n;
    bool oom;
} id_list;

static void ids_free(id_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static bool ids_push(id_list *l, const char *id)
{
    char **grown = realloc(l->v, (l->n + 1) * sizeof *grown);
    char *d = grown ? dup_or_null(id, &l->oom) : NULL;
    if (!grown || !d) {
        if (grown)
            l->v = grown;
        l->oom = true;
        return false;
    }
    l->v = grown;
    l->v[l->n++] = d;
    return true;
}

typedef struct all_ctx {
    tool *t;
    id_list todo;
} all_ctx;

static int visit_crashed(const pl_run_info *info, void *user)
{
    all_ctx *a = user;
    if (info->status != PL_RUN_RUNNING)
        return 0;
    if (!info->owner_alive)
        return ids_push(&a->todo, info->id) ? 0 : PL_ENOMEM;
    tool *t = a->t;
    t->n_skipped++;
    if (t->opt.json) {
        cJSON *s = cJSON_CreateObject();
        if (s) {
            cJSON_AddStringToObject(s, "run_id", info->id);
            cJSON_AddNumberToObject(s, "owner_pid", (double)info->owner_pid);
            cJSON_AddStringToObject(s, "owner_host", or_dash(info->owner_host));
            cJSON_AddStringToObject(s, "reason", "owned by a live process");
            cJSON_AddItemToArray(t->skipped, s);
        }
    } else {
        printf("run %s: skipped: running in live process %lld on %s\n",
               info->id, (long long)info->owner_pid, or_dash(info->owner_host));
    }
    return 0;
}

static void mode_all(tool *t)
{
    all_ctx a = {t, {0}};
    int st = pl_engine_runs(t->engine, visit_crashed, &a);
    if (st) {
        cli_error("listing the runs of %s: %s (%s)", t->opt.store,
                  st == PL_ENOMEM ? "out of memory" : pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
    }
    for (size_t i = 0; !st && i < a.todo.n; i++)
        continue_one(t, a.todo.v[i], "(was crashed)");
    if (!st && !t->opt.json)
        printf("%zu crashed run(s) continued, %u skipped (owned by a live "
               "process)\n",
               a.todo.n, t->n_skipped);
    ids_free(&a.todo);
}

static void mode_resume(tool *t)
{
    const char *id = t->opt.run;
    if (need_run(t, id))
        return;
    const char *src = t->opt.answer;
    char *text = NULL;
    if (src[0] == '@' || !strcmp(src, "-")) {
        text = cli_read_all(src[0] == '@' ? src + 1 : src, ANSWER_MAX);
        if (!text) {
            worst(t, EXIT_USAGE);
            return;
        }
        src = text;
    }
    cJSON *answer = cli_parse_object(src, "--answer");
    free(text);
    if (!answer) {
        worst(t, EXIT_USAGE);
        return;
    }
    char *token = NULL;
    if (t->opt.token) {
        bool oom = false;
        token = dup_or_null(t->opt.token, &oom);
    } else {
        pl_run_info *info = NULL;
        int st = pl_run_get(&info, t->engine, id);
        if (!st && info->status != PL_RUN_SUSPENDED) {
            cli_error("run %s is %s, not suspended: there is nothing to resume",
                      id, pl_run_status_name(info->status));
            worst(t, EXIT_USAGE);
        } else if (!st && !info->resume_token) {
            cli_error("run %s records no resume token: give --token", id);
            worst(t, EXIT_USAGE);
        } else if (st) {
            cli_error("run %s: %s", id, pl_errmsg());
            worst(t, EXIT_OPEN);
        } else {
            bool oom = false;
            token = dup_or_null(info->resume_token, &oom);
        }
        pl_run_info_free(info);
    }
    if (token) {
        pl_outcome *o = NULL;
        double t0 = now_ms();
        int st = pl_run_resume(&o, t->engine, id, token, answer);
        double ms = now_ms() - t0;
        if (st)
            report_refused(t, id, st, refused_code(st));
        else
            report_outcome(t, o, ms, "(resumed)");
        pl_outcome_free(o);
    } else if (!t->exit) {
        cli_error("out of memory");
        worst(t, EXIT_FAILED);
    }
    free(token);
    cJSON_Delete(answer);
}

static void mode_fork(tool *t)
{
    const char *id = t->opt.run;
    if (need_run(t, id))
        return;
    char *new_id = NULL;
    int st = pl_run_fork(&new_id, t->engine, id, t->opt.at, t->opt.new_id);
    if (st) {
        cli_error("cannot fork run %s at %s: %s (%s)", id, t->opt.at,
                  pl_errmsg(), pl_status_name(st));
        worst(t, st == PL_ENOTFOUND || st == PL_EINVAL || st == PL_EBUSY ||
                         st == PL_EEXIST
                     ? EXIT_USAGE
                     : EXIT_FAILED);
        return;
    }
    char note[PL_MAX_RUN_ID + 64];
    snprintf(note, sizeof note, "(forked from %s at %s)", id, t->opt.at);
    continue_one(t, new_id, note);
    if (t->opt.json) {
        cJSON *last = cJSON_GetArrayItem(t->runs,
                                         cJSON_GetArraySize(t->runs) - 1);
        if (last) {
            cJSON_AddStringToObject(last, "forked_from", id);
            cJSON_AddStringToObject(last, "forked_at", t->opt.at);
        }
    }
    free(new_id);
}

/* ---- --check ---------------------------------------------------------------- */

static cJSON *json_step(pl_step_type type, const char *actor,
                        const char *payload, const char *code)
{
    cJSON *s = cJSON_CreateObject();
    if (!s)
        return NULL;
    cJSON_AddItemToObject(s, "type",
                          json_str_or_null(type ? pl_step_type_name(type)
                                                : NULL));
    cJSON_AddItemToObject(s, "actor", json_str_or_null(actor));
    cJSON_AddItemToObject(s, "payload", json_str_or_null(payload));
    cJSON_AddItemToObject(s, "code", json_str_or_null(code));
    return s;
}

static void print_step(const char *label, pl_step_type type, const char *actor,
                       const char *payload, const char *code)
{
    if (!type)
        printf("    %s nothing: the policy ended here (code %s)\n", label,
               or_dash(code));
    else
        printf("    %s %s by '%s' %s (code %s)\n", label,
               pl_step_type_name(type), or_dash(actor),
               payload ? payload : "(the engine's own step)", or_dash(code));
}

/* Check one run.  @p recorded is its status in the store. */
static void check_one(tool *t, const char *id, pl_run_status recorded,
                      int recorded_error)
{
    watch_clear(&t->w);
    pl_outcome *o = NULL;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    double t0 = now_ms();
    int st = pl_run_continue(&o, t->engine, id, &ro);
    double ms = now_ms() - t0;
    const char *verdict = "ok", *note = NULL;
    char *msg = st ? strdup(pl_errmsg()) : NULL;
    if (st == PL_ECHECK)
        note = "replays cleanly up to where its record ends";
    else if (st == PL_ENONDET)
        verdict = "diverged";
    else if (st && recorded == PL_RUN_FAILED && st == recorded_error)
        note = "fails as recorded";
    else if (st)
        verdict = "error";
    const divergence *d = &t->w.div;

    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddStringToObject(j, "check", verdict);
        cJSON_AddStringToObject(j, "status", pl_run_status_name(recorded));
        if (note)
            cJSON_AddStringToObject(j, "note", note);
        if (o)
            json_counters(j, o, ms);
        else
            cJSON_AddNumberToObject(j, "elapsed_ms", ms);
        cJSON *cc = cJSON_AddArrayToObject(j, "code_changed");
        for (size_t i = 0; cc && i < t->w.n_changes; i++) {
            const code_change *c = &t->w.changes[i];
            cJSON *x = cJSON_CreateObject();
            if (!x)
                break;
            cJSON_AddItemToObject(x, "first_step",
                                  json_str_or_null(c->step_id));
            cJSON_AddItemToObject(x, "recorded_code",
                                  json_str_or_null(c->recorded));
            cJSON_AddItemToObject(x, "new_code", json_str_or_null(c->now));
            cJSON_AddNumberToObject(x, "calls", c->count);
            cJSON_AddItemToArray(cc, x);
        }
        if (st == PL_ENONDET) {
            cJSON *dv = cJSON_AddObjectToObject(j, "divergence");
            if (dv && d->seen) {
                cJSON_AddItemToObject(dv, "step_id",
                                      json_str_or_null(d->step_id));
                cJSON_AddItemToObject(dv, "invocation",
                                      json_str_or_null(d->path));
                cJSON_AddNumberToObject(dv, "position", d->seq);
                cJSON_AddItemToObject(dv, "recorded",
                                      json_step(d->rec_type, d->rec_actor,
                                                d->rec_payload, d->rec_code));
                cJSON_AddItemToObject(dv, "new",
                                      json_step(d->new_type, d->new_actor,
                                                d->new_payload, d->new_code));
            }
        }
        if (msg && strcmp(verdict, "ok") != 0)
            cJSON_AddStringToObject(j, "message", msg);
    }
    if (!t->opt.json) {
        printf("check %s (%s): %s%s%s\n", id, pl_run_status_name(recorded),
               verdict, note ? ", " : "", note ? note : "");
        for (size_t i = 0; i < t->w.n_changes; i++) {
            const code_change *c = &t->w.changes[i];
            printf("  recorded by other code%s: %s -> %s (%u call%s, first "
                   "at %s)\n",
                   st == PL_ENONDET ? "" : " that replays the same",
                   or_dash(c->recorded), or_dash(c->now), c->count,
                   c->count == 1 ? "" : "s", or_dash(c->step_id));
        }
        if (st == PL_ENONDET && d->seen) {
            printf("  first divergence at step %s (invocation %s, position "
                   "%u)\n",
                   or_dash(d->step_id), or_dash(d->path), d->seq);
            print_step("recorded:", d->rec_type, d->rec_actor, d->rec_payload,
                       d->rec_code);
            print_step("now:     ", d->new_type, d->new_actor, d->new_payload,
                       d->new_code);
        }
        if (msg && strcmp(verdict, "ok") != 0 && !d->seen)
            printf("  %s\n", msg);
        if (o)
            printf("  calls served from the ledger %llu; %.2f ms\n",
                   (unsigned long long)o->calls_served, ms);
    }
    if (!strcmp(verdict, "ok")) {
        t->n_ok++;
    } else {
        if (st == PL_ENONDET)
            t->n_diverged++;
        else
            t->n_failed++;
        worst(t, EXIT_FAILED);
    }
    free(msg);
    pl_outcome_free(o);
}

typedef struct check_ctx {
    id_list ids;
    pl_run_status *status;
    int *error;
    size_t cap;
} check_ctx;

static int visit_any(const pl_run_info *info, void *user)
{
    check_ctx *c = user;
    if (c->ids.n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        pl_run_status *s = realloc(c->status, cap * sizeof *s);
        if (s)
            c->status = s;
        int *e = s ? realloc(c->error, cap * sizeof *e) : NULL;
        if (e)
            c->error = e;
        if (!s || !e)
            return PL_ENOMEM;
        c->cap = cap;
    }
    c->status[c->ids.n] = info->status;
    c->error[c->ids.n] = info->error;
    return ids_push(&c->ids, info->id) ? 0 : PL_ENOMEM;
}

static void mode_check(tool *t)
{
    check_ctx c = {{0}, NULL, NULL, 0};
    int st;
    if (t->opt.run) {
        pl_run_info *info = NULL;
        st = pl_run_get(&info, t->engine, t->opt.run);
        if (!st)
            st = visit_any(info, &c);
        pl_run_info_free(info);
        if (st == PL_ENOTFOUND) {
            cli_error("no run '%s' in %s", t->opt.run, t->opt.store);
            worst(t, EXIT_OPEN);
            goto done;
        }
    } else {
        st = pl_engine_runs(t->engine, visit_any, &c);
    }
    if (st) {
        cli_error("reading the runs of %s: %s (%s)", t->opt.store,
                  st == PL_ENOMEM ? "out of memory" : pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
        goto done;
    }
    for (size_t i = 0; i < c.ids.n; i++)
        check_one(t, c.ids.v[i], c.status[i], c.error[i]);
    if (!t->opt.json)
        printf("checked %zu run(s): %u ok, %u diverged, %u failed to "
               "replay\n",
               c.ids.n, t->n_ok, t->n_diverged, t->n_failed);
done:
    ids_free(&c.ids);
    free(c.status);
    free(c.error);
}

static void mode_import(tool *t)
{
    const char *path = t->opt.import;
    FILE *in = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!in) {
        cli_error("cannot open the export '%s': %s", path, strerror(errno));
        worst(t, EXIT_USAGE);
        return;
    }
    char *id = NULL;
    int st = pl_run_import(&id, t->engine, in, t->opt.new_id);
    if (in != stdin)
        fclose(in);
    if (st) {
        cli_error("cannot import '%s': %s (%s)", path, pl_errmsg(),
                  pl_status_name(st));
        /* a changed export is refused; anything else is a bad request */
        worst(t, st == PL_ECORRUPT ? EXIT_FAILED : write_code(st));
        return;
    }
    pl_run_info *info = NULL;
    if ((st = pl_run_get(&info, t->engine, id))) {
        cli_error("run %s: %s (%s)", id, pl_errmsg(), pl_status_name(st));
        worst(t, EXIT_OPEN);
        free(id);
        return;
    }
    if (!t->opt.json)
        printf("%s: imported from %s: %s, %llu steps\n", id,
               strcmp(path, "-") ? path : "stdin",
               pl_run_status_name(info->status),
               (unsigned long long)info->steps);
    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddStringToObject(j, "status", pl_run_status_name(info->status));
        cJSON_AddNumberToObject(j, "steps", (double)info->steps);
        cJSON_AddStringToObject(j, "imported_from", path);
    }
    pl_run_info_free(info);
    free(id);
}

/* ---- the queue: --worker and --submit ---------------------------------------- */

static pl_engine *worker_engine; /* for the signal handler */

static void on_stop_signal(int sig)
{
    (void)sig;
    pl_worker_stop(worker_engine); /* async-signal-safe: sets a flag */
}

static void mode_worker(tool *t)
{
    worker_engine = t->engine;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL)) {
        cli_error("cannot catch SIGINT and SIGTERM: %s", strerror(errno));
        worst(t, EXIT_USAGE);
        return;
    }
    uint64_t done = 0, susp = 0, failed = 0, skipped = 0;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.concurrency = t->opt.concurrency;
    wo.completed = &done;
    wo.suspended = &susp;
    wo.failed = &failed;
    wo.skipped = &skipped;
    int st = pl_worker_run(t->engine, &wo);
    if (st) {
        cli_error("the worker stopped: %s (%s)", pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
    }
    if (!t->opt.json)
        fprintf(stderr,
                "%s: worker stopped: %llu completed, %llu suspended, %llu "
                "failed, %llu not executed\n",
                cli_name(), (unsigned long long)done, (unsigned long long)susp,
                (unsigned long long)failed, (unsigned long long)skipped);
    else if (t->runs) {
        cJSON *j = cJSON_CreateObject();
        if (j) {
            cJSON_AddNumberToObject(j, "completed", (double)done);
            cJSON_AddNumberToObject(j, "suspended", (double)susp);
            cJSON_AddNumberToObject(j, "failed", (double)failed);
            cJSON_AddNumberToObject(j, "not_executed", (double)skipped);
            cJSON_AddItemToArray(t->runs, j);
        }
    }
}

static void mode_submit(tool *t)
{
    cJSON *payload = cli_parse_object(t->opt.payload, "--payload");
    if (!payload) {
        worst(t, EXIT_USAGE);
        return;
    }
    pl_action root = PL_ACTION_INIT;
    root.policy = t->opt.submit;
    root.payload = payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = t->opt.new_id;
    char *id = NULL;
    int st = pl_run_submit(&id, t->engine, &root, &ro);
    if (st) {
        cli_error("cannot submit a run of '%s': %s (%s)", t->opt.submit,
                  pl_errmsg(), pl_status_name(st));
        worst(t, write_code(st));
    } else if (t->opt.json && t->runs) {
        cJSON *j = cJSON_CreateObject();
        if (j) {
            cJSON_AddStringToObject(j, "run", id);
            cJSON_AddStringToObject(j, "status", "submitted");
            cJSON_AddItemToArray(t->runs, j);
        }
    } else {
        printf("%s\n", id);
    }
    free(id);
    cJSON_Delete(payload);
}

/* ---- time: --signal, --cancel, --wake ------------------------------------- */

/* A delivery's result: the run's outcome when it was continued here. */
static void report_delivery(tool *t, const char *what, int st, pl_outcome *o,
                            double t0)
{
    if (st) {
        cli_error("cannot %s run %s: %s (%s)", what, t->opt.run, pl_errmsg(),
                  pl_status_name(st));
        worst(t, st == PL_ESTATE || st == PL_EINVAL || st == PL_EJSON ||
                         st == PL_ELIMIT
                     ? EXIT_USAGE
                 : st == PL_ENOTFOUND ? EXIT_OPEN
                                      : write_code(st));
        return;
    }
    if (o) {
        report_outcome(t, o, now_ms() - t0, NULL);
        return;
    }
    cJSON *j = json_run(t, t->opt.run);
    if (j)
        cJSON_AddStringToObject(j, "status", "delivered");
    if (!t->opt.json)
        printf("run %s: %s delivered\n", t->opt.run, what);
}

static void mode_signal(tool *t)
{
    cJSON *payload = cli_parse_object(t->opt.payload, "--payload");
    if (!payload) {
        worst(t, EXIT_USAGE);
        return;
    }
    double t0 = now_ms();
    pl_outcome *o = NULL;
    /* with policies loaded, a run waiting for it goes on here */
    int st = pl_run_signal(t->opt.n_plugins ? &o : NULL, t->engine, t->opt.run,
                           t->opt.name, payload);
    report_delivery(t, "signal", st, o, t0);
    pl_outcome_free(o);
    cJSON_Delete(payload);
}

static void mode_cancel(tool *t)
{
    double t0 = now_ms();
    int st = pl_run_cancel(t->engine, t->opt.run,
                           t->opt.reason ? t->opt.reason : "");
    report_delivery(t, "cancel", st, NULL, t0);
    pl_run_info *ri = NULL;
    if (!st && !pl_run_get(&ri, t->engine, t->opt.run) && !t->opt.json)
        printf("  now %s%s\n", pl_run_status_name(ri->status),
               ri->status == PL_RUN_WAITING
                   ? " (its policies are not loaded here: a worker, or "
                     "--wake with its plugin, ends it)"
               : ri->status == PL_RUN_RUNNING
                   ? " (it sees the cancellation at its next call)"
                   : "");
    pl_run_info_free(ri);
}

static void mode_wake(tool *t)
{
    int64_t next = 0;
    int st = pl_engine_wake(t->engine, &next);
    if (st) {
        cli_error("cannot wake the waiting runs: %s (%s)", pl_errmsg(),
                  pl_status_name(st));
        worst(t, write_code(st));
        return;
    }
    char when[40] = "none";
    if (next)
        cli_time_human(when, sizeof when, next * 1000);
    if (t->opt.json) {
        cJSON *j = json_run(t, "next_due");
        if (j)
            cJSON_AddNumberToObject(j, "due_ms", (double)next);
    } else {
        printf("next due: %s%s\n", when, next ? " UTC" : "");
    }
}

/* ---- --trace and --otel --------------------------------------------------- */

/* Open the trace file and the exporter the options ask for; 0 or -1. */
static int open_observers(tool *t)
{
    const char *trace = t->opt.trace;
    if (trace) {
        const char *path = strcmp(trace, "-") ? trace : "/dev/stderr";
        int st = pl_trace_open(&t->w.trace, path);
        if (st) {
            cli_error("--trace: %s (%s)", pl_errmsg(), pl_status_name(st));
            return -1;
        }
    }
    const char *env_url = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    const char *env_traces = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if (t->opt.otel || (env_url && *env_url) || (env_traces && *env_traces)) {
        pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
        oo.endpoint = t->opt.otel;
        oo.service_name = getenv("OTEL_SERVICE_NAME") ? NULL : "ledger-replay";
        int st = pl_otel_open(&t->w.otel, &oo);
        if (st) {
            cli_error("--otel: %s (%s)", pl_errmsg(), pl_status_name(st));
            return -1;
        }
    }
    return 0;
}

/* Send what is left and close both; a loss is a warning, never a failure
 * of the runs. */
static void close_observers(tool *t)
{
    if (t->w.otel && pl_otel_close(t->w.otel))
        cli_error("warning: %s", pl_errmsg());
    if (t->w.trace && pl_trace_close(t->w.trace))
        cli_error("warning: %s", pl_errmsg());
    t->w.otel = NULL;
    t->w.trace = NULL;
}

/* ---- main -------------------------------------------------------------------- */

static const char *mode_name(enum mode m)
{
    switch (m) {
    case MODE_RUN: return "run";
    case MODE_ALL: return "all";
    case MODE_RESUME: return "resume";
    case MODE_CHECK: return "check";
    case MODE_FORK: return "fork";
    case MODE_IMPORT: return "import";
    case MODE_WORKER: return "worker";
    case MODE_SUBMIT: return "submit";
    case MODE_SIGNAL: return "signal";
    case MODE_CANCEL: return "cancel";
    case MODE_WAKE: return "wake";
    default: return "none";
    }
}

int main(int argc, char **argv)
{
    tool t;
    memset(&t, 0, sizeof t);
    cli_set_name(argv[0]);
    int rc = parse_args(&t.opt, argc, argv);
    if (rc) {
        free(t.opt.plugins);
        return rc < 0 ? 0 : rc;
    }
    if (t.opt.json) {
        t.runs = cJSON_CreateArray();
        t.skipped = cJSON_CreateArray();
        if (!t.runs || !t.skipped) {
            cli_error("out of memory");
            rc = EXIT_FAILED;
            goto done;
        }
    }
    int st = pl_registry_new(&t.reg);
    for (size_t i = 0; !st && i < t.opt.n_plugins; i++) {
        st = pl_plugin_load(t.reg, t.opt.plugins[i]);
        if (st)
            cli_error("cannot load plugin: %s (%s)", pl_errmsg(),
                      pl_status_name(st));
    }
    if (st) {
        rc = EXIT_OPEN;
        goto done;
    }
    if (t.opt.mode != MODE_IMPORT && t.opt.mode != MODE_SUBMIT &&
        cli_store_exists(t.opt.store)) {
        rc = EXIT_OPEN;
        goto done;
    }
    if (open_observers(&t)) {
        rc = EXIT_USAGE;
        goto done;
    }
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_event;
    eo.event_user = &t.w;
    eo.lease_ms = t.opt.lease_ms;
    if ((st = pl_engine_open(&t.engine, t.opt.store, t.reg, &eo))) {
        cli_error("cannot open the store '%s': %s (%s)", t.opt.store,
                  pl_errmsg(), pl_status_name(st));
        rc = EXIT_OPEN;
        goto done;
    }
    switch (t.opt.mode) {
    case MODE_RUN:
        if (!need_run(&t, t.opt.run))
            continue_one(&t, t.opt.run, NULL);
        break;
    case MODE_ALL: mode_all(&t); break;
    case MODE_RESUME: mode_resume(&t); break;
    case MODE_CHECK: mode_check(&t); break;
    case MODE_FORK: mode_fork(&t); break;
    case MODE_IMPORT: mode_import(&t); break;
    case MODE_WORKER: mode_worker(&t); break;
    case MODE_SUBMIT: mode_submit(&t); break;
    case MODE_SIGNAL: mode_signal(&t); break;
    case MODE_CANCEL: mode_cancel(&t); break;
    case MODE_WAKE: mode_wake(&t); break;
    default: break;
    }
    if (t.w.oom) {
        cli_error("out of memory recording what the replay reported");
        worst(&t, EXIT_FAILED);
    }
    rc = t.exit;
    if (t.opt.json) {
        cJSON *doc = cJSON_CreateObject();
        if (doc) {
            cJSON_AddStringToObject(doc, "store", t.opt.store);
            cJSON_AddStringToObject(doc, "mode", mode_name(t.opt.mode));
            cJSON_AddItemToObject(doc, "runs", t.runs);
            cJSON_AddItemToObject(doc, "skipped", t.skipped);
            t.runs = t.skipped = NULL;
            cJSON_AddNumberToObject(doc, "exit", rc);
        }
        char *text = doc ? cJSON_Print(doc) : NULL;
        if (text)
            printf("%s\n", text);
        else {
            cli_error("out of memory printing the summary");
            rc = EXIT_FAILED;
        }
        free(text);
        cJSON_Delete(doc);
    }
done:
    pl_engine_close(t.engine);
    t.engine = NULL;
    close_observers(&t);
    watch_clear(&t.w);
    cJSON_Delete(t.runs);
    cJSON_Delete(t.skipped);
    pl_engine_close(t.engine);
    pl_registry_free(t.reg);
    free(t.opt.plugins);
    return rc;
}
