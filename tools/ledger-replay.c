/*
 * ledger-replay -- finish, resume, check, upgrade and fork the runs of a
 * store, with the policies of the plugins given.
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
 *   4  a run ended suspended or waiting (and none failed)
 *   5  a run failed, was cancelled or diverged, or an export to import was
 *      changed
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <policyledger_mcp.h>

#include "replay.h"

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
        "that\n"
        "                        recorded the step and the code loaded now.  "
        "The\n"
        "                        deploy-safety check.\n"
        "  --check --live        the deploy gate: check only the runs not yet "
        "final\n"
        "                        (running, suspended, submitted, waiting) "
        "and exit 5\n"
        "                        if any would fail under the loaded code, "
        "naming each.\n"
        "                        Every --check also lists the live runs by "
        "the version\n"
        "                        of each change they replay (pl_ctx_version) "
        "and by\n"
        "                        the code identity that recorded them\n"
        "  --upgrade ID [--new-id NEW] [--dry-run]\n"
        "  --upgrade --all-diverged [--dry-run]\n"
        "                        for a run the loaded code cannot replay "
        "(every such\n"
        "                        run not final, or failed): print the plan "
        "(where it is\n"
        "                        forked, and every call recorded after that "
        "point, with\n"
        "                        its idempotency key: each may run again if "
        "the new code\n"
        "                        makes it again), then fork it before its "
        "first\n"
        "                        divergence, end it `superseded` (linked "
        "both ways) and\n"
        "                        continue the new run.  --dry-run prints the "
        "plan and\n"
        "                        writes nothing\n"
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
        "sees it at\n"
        "                        its next call, a suspended one ends now; a "
        "run ended\n"
        "                        here is summed up as --run does (exit 5)\n"
        "  --wake                continue every waiting run whose time has "
        "come, once;\n"
        "                        sum up each as --run does and print when "
        "the next one\n"
        "                        is due (--worker wakes them as they come "
        "due)\n"
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
        "  --worker [--concurrency N] [--lease-ms MS] [--retain DURATION]\n"
        "      [--retain-failed DURATION]\n"
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
        "                        has run out.  --retain, --retain-failed: "
        "its retention\n"
        "                        rule (below, after --prune)\n"
        "  --submit POLICY --payload JSON [--new-id ID]\n"
        "                        queue a run of POLICY for a worker, without "
        "executing\n"
        "                        it (the store is created if need be); prints "
        "its id\n"
        "    [--priority N]      its priority, -1000..1000 (default 0): "
        "higher first\n"
        "    [--key K --key-limit N]\n"
        "                        its concurrency key: at most N runs with key "
        "K execute\n"
        "                        at once, on every worker sharing the store\n",
        f);
    usage_retention(f); /* --prune */
    fputs(
        "  --schedule-put NAME --cron EXPR [--zone Z] --policy P --payload "
        "JSON\n"
        "      [--overlap skip|allow] [--catch-up skip|latest|all:N]\n"
        "      [--priority N] [--key K --key-limit N] [--deadline DURATION]\n"
        "                        create or replace schedule NAME: a run of P "
        "at every\n"
        "                        tick of the cron expression (5 fields) in "
        "zone Z (UTC\n"
        "                        by default, or a tz name such as "
        "Europe/London), its\n"
        "                        id NAME@<tick>; the workers start them.  "
        "--overlap:\n"
        "                        skip a tick while the last run is live "
        "(default), or\n"
        "                        allow it; --catch-up: after a pause, start "
        "no missed\n"
        "                        tick (default), the latest, or each of the "
        "last N.\n"
        "                        Each run is submitted with --priority and "
        "--key as\n"
        "                        --submit's, and must end within --deadline "
        "(30m, 2h)\n"
        "                        of its tick.\n"
        "                        Needs no --plugin; the store is created if "
        "need be\n"
        "  --schedule-delete NAME\n"
        "                        delete schedule NAME (its runs stay)\n"
        "\n"
        "Options:\n"
        "  --plugin LIB.so       load a plugin's policies (repeatable; at "
        "least one but\n"
        "                        for --import, --signal, --cancel, --prune "
        "and the\n"
        "                        schedules' modes)\n"
        "  --mcp NAME=SPEC       register the tools of an MCP server as "
        "NAME.TOOL\n"
        "                        (SPEC \"stdio:COMMAND ARG...\" or an "
        "http(s):// URL;\n"
        "                        repeatable; may stand for --plugin)\n"
        "  --mcp-env NAME=VAR    pass the variable VAR of this environment "
        "on to the\n"
        "                        process of --mcp server NAME (a stdio: "
        "one; repeatable)\n"
        "  --mcp-token-env NAME=VAR\n"
        "                        send VAR's value as the bearer token of "
        "--mcp server\n"
        "                        NAME (an http(s):// one; read at each "
        "request, never\n"
        "                        recorded)\n"
        "  --mcp-unchecked       a tool of an --mcp server whose inputSchema "
        "the\n"
        "                        validator refuses is registered without it "
        "(its\n"
        "                        arguments unchecked), not the server "
        "refused\n"
        "  --json                print the summaries as one JSON document on "
        "stdout\n"
        "                        (a failure too: its exit, message and "
        "error)\n"
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
        "..._TRACES_ENDPOINT)\n"
        "                        turns it on.  OTEL_EXPORTER_OTLP_HEADERS "
        "adds headers.\n"
        "                        A collector that is down never fails a "
        "run\n"
        "  -h, --help            this text\n"
        "\n"
        "Every run ends with a summary: its status, the calls served from the "
        "ledger,\n"
        "the calls executed, and the time it took.\n"
        "\n"
        "Exit status:\n"
        "  0  every run completed (--check: every run replays cleanly; "
        "--signal,\n"
        "     --cancel: delivered, the run goes on elsewhere)\n"
        "  1  bad usage, or a request the run's state refuses (resuming a run "
        "that is\n"
        "     not suspended, a wrong token, a fork step that is not there, a "
        "run that a\n"
        "     live process owns, a signal or cancel to a run that has ended, "
        "a run\n"
        "     recorded by newer code, left for it), or an export to import "
        "that is\n"
        "     malformed or whose run id is taken\n"
        "  2  the store, a plugin or an MCP server cannot be opened (a "
        "missing store\n"
        "     too: only --submit, --import and --schedule-put create one), or "
        "the run\n"
        "     or schedule does not exist, or the store cannot be written "
        "(full,\n"
        "     read-only): the run is left to continue; or the output cannot "
        "be\n"
        "     written (a full disk)\n"
        "  3  --wake: the due runs were woken, but a schedule failed to "
        "fire\n"
        "  4  a run ended suspended or waiting (none failed)\n"
        "  5  a run failed or was cancelled, or (--check) diverged or needs a "
        "version the\n"
        "     loaded code does not support, or (--import) the export was "
        "changed, or\n"
        "     (--prune --archive) a run's export could not be written\n"
        "\n"
        "Examples:\n"
        "  # the order service crashed: finish every run it left behind\n"
        "  ledger-replay orders.db --plugin ./order-plugin.so --all\n"
        "\n"
        "  # finish one run, and show what it cost\n"
        "  ledger-replay orders.db --plugin ./order-plugin.so --run "
        "order-A-1001\n"
        "\n"
        "  # a human approved the refund the run is waiting for\n"
        "  ledger-replay orders.db --plugin ./refunds.so --resume r-17 \\\n"
        "      --answer '{\"approved\": true}'\n"
        "\n"
        "  # before deploying a new build: does it still replay every run?\n"
        "  ledger-replay orders.db --plugin ./build/new/order-plugin.so "
        "--check --json\n"
        "\n"
        "  # three hosts drain one queue; one submits\n"
        "  ledger-replay postgresql://db/orders --plugin ./order-plugin.so "
        "\\\n"
        "      --submit order --payload \\\n"
        "      '{\"order_id\": \"A-1\", \"items\": [], "
        "\"amount_cents\": 100}'\n"
        "  PL_WORKER_HOST=web-2 ledger-replay postgresql://db/orders "
        "--plugin \\\n"
        "      ./order-plugin.so --worker --concurrency 8\n"
        "\n"
        "  # the release pipeline's gate: would the new build strand a "
        "live run?\n"
        "  ledger-replay orders.db --plugin ./build/new/order-plugin.so "
        "--check --live\n"
        "\n"
        "  # it would: see what upgrading them would repeat, then do it\n"
        "  ledger-replay orders.db --plugin ./new/order-plugin.so \\\n"
        "      --upgrade --all-diverged --dry-run\n"
        "  ledger-replay orders.db --plugin ./new/order-plugin.so \\\n"
        "      --upgrade --all-diverged\n"
        "\n"
        "  # re-run order-A-1001 from its third step with today's code\n"
        "  ledger-replay orders.db --plugin ./order-plugin.so \\\n"
        "      --fork order-A-1001 --at 0:2\n",
        f);
}

/* A count for --concurrency (1..256) or --lease-ms (100..86400000). */
static int parse_count(unsigned *out, const char *flag, const char *v,
                       unsigned long lo, unsigned long hi)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || end == v || *end || !isdigit((unsigned char)v[0]) || n < lo ||
        n > hi) {
        cli_error("%s needs a whole number from %lu to %lu, not %s", flag, lo,
                  hi, QUOTE(v));
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

static int set_mode(options *o, enum mode m, const char *flag);

static bool is_queue_flag(const char *a)
{
    static const char *const flags[] = {
        "--concurrency",  "--lease-ms",        "--submit",
        "--payload",      "--priority",        "--key",
        "--key-limit",    "--retain",          "--retain-failed",
        "--older-than",   "--status",          "--archive",
        "--schedule-put", "--schedule-delete", "--cron",
        "--zone",         "--policy",          "--overlap",
        "--catch-up",     "--deadline"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(a, flags[i]))
            return true;
    return false;
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
    if (!strcmp(a, "--key"))
        o->key = v;
    if (!strcmp(a, "--key-limit"))
        return parse_count(&o->key_limit, a, v, 1, 1000000);
    if (!strcmp(a, "--priority")) {
        /* kept shifted by MAX + 1, so that 0 says "not given" */
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || end == v || *end ||
            !(isdigit((unsigned char)v[0]) ||
              (v[0] == '-' && isdigit((unsigned char)v[1]))) ||
            n < -PL_PRIORITY_MAX || n > PL_PRIORITY_MAX) {
            cli_error("--priority needs a whole number from %d to %d, not "
                      "%s",
                      -PL_PRIORITY_MAX, PL_PRIORITY_MAX, QUOTE(v));
            return -1;
        }
        o->priority = (int)n + PL_PRIORITY_MAX + 1;
    }
    if (!strcmp(a, "--schedule-put")) {
        o->sched_put = v;
        return set_mode(o, MODE_SCHED_PUT, a);
    }
    if (!strcmp(a, "--schedule-delete")) {
        o->sched_delete = v;
        return set_mode(o, MODE_SCHED_DELETE, a);
    }
    const char **slot = !strcmp(a, "--cron")       ? &o->cron
                        : !strcmp(a, "--zone")     ? &o->zone
                        : !strcmp(a, "--policy")   ? &o->policy
                        : !strcmp(a, "--overlap")  ? &o->overlap
                        : !strcmp(a, "--catch-up") ? &o->catch_up
                        : !strcmp(a, "--deadline") ? &o->deadline
                                                   : retention_slot(o, a);
    if (slot)
        *slot = v;
    return 0;
}

static int set_mode(options *o, enum mode m, const char *flag)
{
    if (o->mode != MODE_NONE && o->mode != m) {
        cli_error(
            "%s cannot be combined with another mode (--run, --all, "
            "--resume, --check, --fork, --upgrade, --import, --worker, "
            "--submit, --signal, --cancel, --wake, --prune, --schedule-put, "
            "--schedule-delete: pick one)",
            flag);
        return -1;
    }
    o->mode = m;
    return 0;
}

/* Parse argv into @p o; 0, or an exit status (-1 for --help: exit 0). */
static int parse_args(options *o, int argc, char **argv)
{
    /* its messages quote a user's string as every message of ours does */
    _Static_assert(CLI_QUOTE_MAX <= MCP_FLAGS_QUOTE_MAX, "cli_quote()'s room");
    o->mcp.quote = cli_quote;
    bool check = false, run_flag = false;
    cli_seen seen = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout); /* a help lost to a full disk says so */
            return cli_stdout_ok() ? -1 : CLI_EXIT_STORE;
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
        if (!strcmp(a, "--live")) {
            o->live = true;
            continue;
        }
        if (!strcmp(a, "--mcp-unchecked")) {
            o->mcp_unchecked = true;
            continue;
        }
        if (!strcmp(a, "--all-diverged")) {
            o->all_diverged = true;
            continue;
        }
        if (!strcmp(a, "--dry-run")) {
            o->dry_run = true;
            continue;
        }
        if (!strcmp(a, "--upgrade")) {
            if (!cli_once(&seen, a, NULL) || set_mode(o, MODE_UPGRADE, a))
                return EXIT_USAGE;
            if (v && v[0] != '-') { /* its ID, unless --all-diverged */
                o->run = v;
                i++;
            }
            continue;
        }
        if (!strcmp(a, "--worker")) {
            if (set_mode(o, MODE_WORKER, a))
                return EXIT_USAGE;
            continue;
        }
        if (!strcmp(a, "--prune")) {
            if (set_mode(o, MODE_PRUNE, a))
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
                cli_error("unexpected argument %s (the store is %s)", QUOTE(a),
                          QUOTE(cli_store_shown(o->store)));
                return EXIT_USAGE;
            }
            o->store = a;
            continue;
        }
        if (is_queue_flag(a)) {
            if (!cli_once(&seen, a, NULL))
                return EXIT_USAGE;
            if (!v) {
                cli_error("%s needs a value", a);
                return EXIT_USAGE;
            }
            i++;
            if (parse_queue_flag(o, a, v))
                return EXIT_USAGE;
            continue;
        }
        if (mcp_flags_takes(a)) {
            char why[512];
            if (!v) {
                cli_error("%s needs a value", a);
                return EXIT_USAGE;
            }
            i++;
            if (mcp_flags_add(&o->mcp, a, v, why, sizeof why)) {
                cli_error("%s", why);
                return EXIT_USAGE;
            }
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
            cli_error("unknown option %s (see --help)", QUOTE(a));
            return EXIT_USAGE;
        }
        if (!v) {
            cli_error("%s needs a value", a);
            return EXIT_USAGE;
        }
        i++;
        bool many = !strcmp(a, "--plugin");
        if (!many && !cli_once(&seen, a, NULL))
            return EXIT_USAGE;
        if (many) {
            const char **grown = realloc(o->plugins,
                                         (o->n_plugins + 1) * sizeof *grown);
            if (!grown) {
                cli_error("out of memory");
                return EXIT_USAGE;
            }
            o->plugins = grown;
            grown[o->n_plugins++] = v;
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
    if (!*o->store) {
        cli_error("the store path is empty");
        return EXIT_USAGE;
    }
    bool sched = o->mode == MODE_SCHED_PUT || o->mode == MODE_SCHED_DELETE;
    if ((o->cron || o->zone || o->policy || o->overlap || o->catch_up ||
         o->deadline) &&
        o->mode != MODE_SCHED_PUT) {
        cli_error("--cron, --zone, --policy, --overlap, --catch-up and "
                  "--deadline go with --schedule-put");
        return EXIT_USAGE;
    }
    if (o->mode == MODE_SCHED_PUT && (!o->cron || !o->policy || !o->payload)) {
        cli_error("--schedule-put needs --cron EXPR, --policy NAME and "
                  "--payload JSON");
        return EXIT_USAGE;
    }
    if (o->mcp_unchecked && !o->mcp.n) {
        cli_error("--mcp-unchecked goes with --mcp NAME=SPEC");
        return EXIT_USAGE;
    }
    char why[512];
    if (mcp_flags_check(&o->mcp, why, sizeof why)) {
        cli_error("%s", why);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < o->mcp.n; i++)
        if (!mcp_flags_server_ok(&o->mcp.v[i])) {
            cli_error("--mcp %s=%s: expected NAME=SPEC, NAME 1..64 bytes "
                      "without a dot, SPEC \"stdio:COMMAND ARG...\" or an "
                      "http:// or https:// URL with a host",
                      QUOTE(o->mcp.v[i].name), QUOTE(o->mcp.v[i].spec));
            return EXIT_USAGE;
        }
    /* before the plugin: a mode may need none (--prune, --import, ...) */
    if (o->mode == MODE_NONE) {
        cli_error("nothing to do: give a mode: --run ID, --all, --resume ID, "
                  "--check, --upgrade, --fork ID, --signal ID, --cancel ID, "
                  "--wake, --import FILE, --worker, --submit POLICY, "
                  "--prune, --schedule-put NAME or --schedule-delete NAME "
                  "(see --help)");
        return EXIT_USAGE;
    }
    if (!o->n_plugins && !o->mcp.n && o->mode != MODE_IMPORT && !sched &&
        o->mode != MODE_SIGNAL && o->mode != MODE_CANCEL &&
        o->mode != MODE_PRUNE) {
        cli_error("no --plugin given: the policies to replay with come from "
                  "plugins");
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
        o->mode != MODE_SUBMIT && (o->mode != MODE_UPGRADE || !o->run)) {
        cli_error("--new-id goes with --fork, --import, --submit or "
                  "--upgrade ID");
        return EXIT_USAGE;
    }
    if (o->live && o->mode != MODE_CHECK) {
        cli_error("--live goes with --check");
        return EXIT_USAGE;
    }
    if (o->all_diverged && o->mode != MODE_UPGRADE) {
        cli_error("--all-diverged goes with --upgrade");
        return EXIT_USAGE;
    }
    if (check_retention_args(o))
        return EXIT_USAGE;
    if (o->mode == MODE_UPGRADE && !o->run == !o->all_diverged) {
        cli_error("--upgrade needs a run ID or --all-diverged (one of them)");
        return EXIT_USAGE;
    }
    if ((o->concurrency || o->lease_ms) && o->mode != MODE_WORKER) {
        cli_error("--concurrency and --lease-ms go with --worker");
        return EXIT_USAGE;
    }
    bool wants_payload = o->mode == MODE_SUBMIT || o->mode == MODE_SIGNAL ||
                         o->mode == MODE_SCHED_PUT;
    if (!o->payload != !wants_payload) {
        cli_error(o->payload ? "--payload goes with --submit, --signal or "
                               "--schedule-put"
                  : o->mode == MODE_SIGNAL ? "--signal needs --payload JSON"
                                           : "--submit needs --payload JSON");
        return EXIT_USAGE;
    }
    if (!o->name != (o->mode != MODE_SIGNAL)) {
        cli_error(o->name ? "--name goes with --signal"
                          : "--signal needs --name EVENT");
        return EXIT_USAGE;
    }
    if (o->name && !cli_name_ok(o->name)) {
        cli_error("--name: an event name is 1..%d bytes, no control "
                  "characters",
                  PL_MAX_NAME);
        return EXIT_USAGE;
    }
    if (o->reason && o->mode != MODE_CANCEL) {
        cli_error("--reason goes with --cancel");
        return EXIT_USAGE;
    }
    if ((o->priority || o->key || o->key_limit) && o->mode != MODE_SUBMIT &&
        o->mode != MODE_SCHED_PUT) {
        cli_error("--priority, --key and --key-limit go with --submit or "
                  "--schedule-put");
        return EXIT_USAGE;
    }
    if (!o->key != !o->key_limit) {
        cli_error(o->key ? "--key needs --key-limit N"
                         : "--key-limit goes with --key");
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

/* ---- main -------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    tool t;
    memset(&t, 0, sizeof t);
    cli_set_name(argv[0]);
    /* --json anywhere: a usage error prints the document too */
    bool json = false;
    for (int i = 1; i < argc; i++)
        json = json || !strcmp(argv[i], "--json");
    cli_keep_first_error(json);
    int rc = parse_args(&t.opt, argc, argv);
    pl_mcp **mcps = NULL;
    const char *why = NULL; /* the library's status of a failure before
                               the store is open */
    if (rc) {
        t.opt.json = json;
        if (rc > 0)
            rc = print_document(&t, rc, NULL);
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
        st = cli_plugin_load(t.reg, t.opt.plugins[i]);
        if (st)
            cli_error("cannot load plugin: %s (%s)", pl_errmsg(),
                      pl_status_name(st));
    }
    if (!st && t.opt.mcp.n && !(mcps = calloc(t.opt.mcp.n, sizeof *mcps)))
        st = PL_ENOMEM;
    t.mcps = mcps;
    for (size_t i = 0; !st && i < t.opt.mcp.n; i++) {
        const char *name = t.opt.mcp.v[i].name;
        pl_mcp_options mo = PL_MCP_OPTIONS_INIT;
        mo.unchecked_schemas = t.opt.mcp_unchecked;
        st = mcp_flags_register(&mcps[i], t.reg, &t.opt.mcp, i, &mo);
        if (st)
            cli_error("cannot register the MCP server %s: %s (%s)%s",
                      QUOTE(name), pl_errmsg(), pl_status_name(st),
                      st == PL_EINVAL && strstr(pl_errmsg(), "inputSchema")
                          ? "; --mcp-unchecked registers such a tool "
                            "without its schema"
                          : "");
    }
    if (st) {
        rc = EXIT_OPEN;
        why = pl_status_name(st);
        goto done;
    }
    /* everything is checked before the store is opened, and only
     * --submit and --import create one */
    bool sched = t.opt.mode == MODE_SCHED_PUT ||
                 t.opt.mode == MODE_SCHED_DELETE;
    rc = t.opt.mode == MODE_SUBMIT   ? prepare_submit(&t)
         : t.opt.mode == MODE_IMPORT ? prepare_import(&t)
         : t.opt.mode == MODE_RESUME ? prepare_resume(&t)
         : t.opt.mode == MODE_PRUNE  ? prepare_prune(&t)
         : t.opt.mode == MODE_WORKER ? prepare_worker(&t)
         : sched                     ? prepare_schedule(&t)
         : t.opt.mode == MODE_SIGNAL ? prepare_signal(&t)
                                     : 0;
    if (rc)
        goto done;
    if (open_observers(&t)) {
        rc = EXIT_USAGE;
        goto done;
    }
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_event;
    eo.event_user = &t.w;
    eo.lease_ms = t.opt.lease_ms;
    eo.no_create = t.opt.mode != MODE_SUBMIT && t.opt.mode != MODE_IMPORT &&
                   t.opt.mode != MODE_SCHED_PUT;
    /* --check, --upgrade --dry-run and --prune --dry-run write nothing: a
     * read-only store or file system will do */
    eo.read_only = t.opt.mode == MODE_CHECK ||
                   ((t.opt.mode == MODE_UPGRADE || t.opt.mode == MODE_PRUNE) &&
                    t.opt.dry_run);
    if ((st = pl_engine_open(&t.engine, t.opt.store, t.reg, &eo))) {
        char q[CLI_QUOTE_MAX];
        if (st == PL_ENOTFOUND && eo.no_create)
            cli_error("no store at %s: --%s needs an existing store, and "
                      "nothing was created (PL_ENOTFOUND)",
                      cli_quote(q, sizeof q, cli_store_shown(t.opt.store)),
                      mode_name(t.opt.mode));
        else
            cli_error("cannot open the store %s: %s (%s)",
                      cli_quote(q, sizeof q, cli_store_shown(t.opt.store)),
                      pl_errmsg(), pl_status_name(st));
        rc = EXIT_OPEN;
        why = pl_status_name(st);
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
    case MODE_PRUNE: mode_prune(&t); break;
    case MODE_UPGRADE: mode_upgrade(&t); break;
    case MODE_SCHED_PUT:
    case MODE_SCHED_DELETE: mode_schedule(&t); break;
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
    rc = print_document(&t, rc, NULL);
    /* a summary lost to a full disk must not pass for one written */
    if (!cli_stdout_ok() && rc != EXIT_USAGE) {
        say_lost(&t);
        rc = EXIT_OPEN;
    }
done:
    /* a command that stopped before its runs still prints its document */
    rc = print_document(&t, rc, why);
    pl_engine_close(t.engine);
    t.engine = NULL;
    close_observers(&t, rc);
    watch_clear(&t.w);
    tallies_free(&t);
    cJSON_Delete(t.runs);
    cJSON_Delete(t.skipped);
    cJSON_Delete(t.sched_json);
    cJSON_Delete(t.payload);
    cJSON_Delete(t.answer);
    if (t.import_in)
        fclose(t.import_in);
    pl_engine_close(t.engine);
    for (size_t i = 0; mcps && i < t.opt.mcp.n; i++)
        pl_mcp_close(mcps[i]);
    free(mcps);
    pl_registry_free(t.reg);
    free(t.opt.plugins);
    return rc;
}
