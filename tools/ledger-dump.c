/*
 * ledger-dump -- show what the runs of a policyledger store did.
 *
 * Reads the store through the public API only, opened read-only with an
 * empty registry: it never creates a store, writes, or takes over a run,
 * so it is safe on a store other processes are writing.  See usage() for
 * the surface and the exit codes.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger_llm.h>

#include "dump.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ledger-dump STORE [options]\n"
        "\n"
        "Show the runs of a policyledger store and the steps they recorded.  The\n"
        "store is opened read-only: nothing is created or changed, and it is safe\n"
        "to use while other processes run workflows on it.\n"
        "\n"
        "With no options, one line per run: id, root policy, status, steps, and\n"
        "when it was created and last updated (UTC).  A run whose owner process\n"
        "died while running it shows as 'running (owner gone: crashed)'.\n"
        "\n"
        "Options:\n"
        "  --run ID            show run ID as a tree of invocations and their steps;\n"
        "                      in-doubt calls, error results, a failed run's reason\n"
        "                      and a suspended run's prompt and resume token are marked;\n"
        "                      an LLM agent's run shows its model calls' token totals\n"
        "  --full              print payloads whole (default: shortened to %d bytes)\n"
        "  --format FORMAT     text (default), json (one document) or jsonl (one\n"
        "                      object per line: per step with --run, else per run).\n"
        "                      With --run, jsonl fields are run, path, seq, id, actor,\n"
        "                      type, payload, time, time_us, code, hash, prev_hash,\n"
        "                      mark; with no filter and no --follow, the output is the\n"
        "                      run's complete export: a first line describing the run\n"
        "                      (\"kind\":\"run\") and each step's stored \"record\"\n"
        "                      (or \"derived\":true), which ledger-replay --import\n"
        "                      loads; with filters or --follow, step lines only\n"
        "  --status STATUS     runs with this status: running, suspended, completed,\n"
        "                      failed, submitted, waiting, cancelled, superseded,\n"
        "                      continued\n"
        "  --policy NAME       runs whose root policy is NAME; with --run, steps whose\n"
        "                      actor is NAME\n"
        "  --type TYPE         steps of this type (text, action_call, action_result,\n"
        "                      suspend, resume, side_effect, error, wait, event,\n"
        "                      cancel)\n"
        "  --actor NAME        steps by this actor\n"
        "  --invocation PATH   steps of invocation PATH and the ones below it\n"
        "  --since TIME        runs updated, or steps recorded, at or after TIME: an\n"
        "                      ISO 8601 date or UTC date-time (2026-11-24,\n"
        "                      2026-11-24T15:04:05Z) or a time ago (90s, 10m, 2h, 3d)\n"
        "  --follow            with --run: print steps as they are appended, until\n"
        "                      the run ends or suspends (followed while queued or\n"
        "                      waiting), or its owner is gone and nothing changes\n"
        "  --chain             with --run: the run's chain of runs continued as new\n"
        "                      (pl_ctx_continue_as_new), first link to last, each\n"
        "                      with its status and steps; deleted, damaged links marked\n"
        "  --verify            check every run (or the one of --run): every value\n"
        "                      decodes, every hash chain links, every run record\n"
        "                      matches its ledgers; each fault is printed\n"
        "  --stats             runs by status, steps, store size and free pages, and\n"
        "                      the largest runs\n"
        "  --schedules         the schedules: name, cron expression, zone, root\n"
        "                      policy, overlap and catch-up rules, and the next tick\n"
        "                      (a tick no worker has fired yet is marked due)\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit codes: 0 fine; 1 bad usage; 2 the store cannot be opened or read, or\n"
        "the run does not exist, or the output cannot be written (a full disk); 3\n"
        "--verify found a fault.\n"
        "\n"
        "Examples:\n"
        "  ledger-dump ./store                          list every run\n"
        "  ledger-dump ./store --status running         crashed or live runs\n"
        "  ledger-dump ./store --run 0192f3... --full   one run, payloads whole\n"
        "  ledger-dump ./store --run ID --type action_call --since 2h\n"
        "  ledger-dump ./store --run ID --format jsonl | jq -r .type\n"
        "  ledger-dump ./store --run ID --follow        watch a run as it goes\n"
        "  ledger-dump ./store --verify                 check every hash chain\n"
        "  ledger-dump ./store --stats --format json\n"
        "  ledger-dump ./store --schedules\n",
        SHORT_PAYLOAD);
}

/* ---- arguments ------------------------------------------------------------ */

static bool path_ok(const char *p)
{
    /* "0", "0.3", "0.3.1": numbers joined by dots */
    bool digit = false;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digit = true;
        else if (*p == '.' && digit)
            digit = false;
        else
            return false;
    }
    return digit;
}

static int parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->format = FMT_TEXT;
    int64_t now = cli_now_us();
    static const char *const one[] = {"--run",    "--format",     "--status",
                                      "--policy", "--actor",      "--type",
                                      "--since",  "--invocation", NULL};
    cli_seen seen = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!cli_once(&seen, a, one))
            return CLI_EXIT_USAGE;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout); /* a help lost to a full disk says so */
            exit(cli_stdout_ok() ? CLI_EXIT_OK : CLI_EXIT_STORE);
        } else if (!strcmp(a, "--full")) {
            o->full = true;
        } else if (!strcmp(a, "--follow")) {
            o->follow = true;
        } else if (!strcmp(a, "--chain")) {
            o->chain = true;
        } else if (!strcmp(a, "--verify")) {
            o->verify = true;
        } else if (!strcmp(a, "--schedules")) {
            o->schedules = true;
        } else if (!strcmp(a, "--stats")) {
            o->stats = true;
        } else if (cli_option(argc, argv, &i, "--run", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!*v) {
                cli_error("--run needs a run id");
                return CLI_EXIT_USAGE;
            }
            o->run = v;
        } else if (cli_option(argc, argv, &i, "--format", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!strcmp(v, "text"))
                o->format = FMT_TEXT;
            else if (!strcmp(v, "json"))
                o->format = FMT_JSON;
            else if (!strcmp(v, "jsonl"))
                o->format = FMT_JSONL;
            else {
                cli_error("unknown --format %s (text, json or jsonl)",
                          QUOTE(v));
                return CLI_EXIT_USAGE;
            }
        } else if (cli_option(argc, argv, &i, "--status", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            bool found = false;
            for (int s = PL_RUN_RUNNING; s <= STATUS_MAX; s++)
                if (pl_run_status_name((pl_run_status)s) &&
                    !strcmp(v, pl_run_status_name((pl_run_status)s))) {
                    o->status = (pl_run_status)s;
                    found = true;
                }
            if (!found) {
                cli_error("unknown --status %s (running, suspended, "
                          "completed, failed, submitted, waiting, "
                          "cancelled, superseded or continued)",
                          QUOTE(v));
                return CLI_EXIT_USAGE;
            }
            o->has_status = true;
        } else if (cli_option(argc, argv, &i, "--policy", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            o->policy = v;
        } else if (cli_option(argc, argv, &i, "--actor", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            o->actor = v;
        } else if (cli_option(argc, argv, &i, "--type", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (pl_step_type_parse(&o->type, v)) {
                cli_error("unknown --type %s (text, action_call, "
                          "action_result, suspend, resume, side_effect, "
                          "error, wait, event or cancel)",
                          QUOTE(v));
                return CLI_EXIT_USAGE;
            }
            o->has_type = true;
        } else if (cli_option(argc, argv, &i, "--invocation", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!path_ok(v)) {
                cli_error("bad --invocation %s: an invocation path is "
                          "numbers joined by dots, like 0 or 0.3.1",
                          QUOTE(v));
                return CLI_EXIT_USAGE;
            }
            o->invocation = v;
        } else if (cli_option(argc, argv, &i, "--since", &v)) {
            if (!v)
                return CLI_EXIT_USAGE;
            if (!cli_parse_time(&o->since_us, v, now)) {
                cli_error("bad --since %s: give an ISO 8601 date or UTC "
                          "date-time (2026-11-24, 2026-11-24T15:04:05Z) or "
                          "a time ago (90s, 10m, 2h, 3d)",
                          QUOTE(v));
                return CLI_EXIT_USAGE;
            }
            o->has_since = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            cli_error("unknown option %s (see --help)", QUOTE(a));
            return CLI_EXIT_USAGE;
        } else if (!o->store) {
            o->store = a;
        } else {
            cli_error("unexpected argument %s: give one store (see --help)",
                      QUOTE(a));
            return CLI_EXIT_USAGE;
        }
    }
    if (!o->store) {
        cli_error("no store given (see --help)");
        return CLI_EXIT_USAGE;
    }
    if (!*o->store) {
        cli_error("the store path is empty");
        return CLI_EXIT_USAGE;
    }
    if ((o->full || o->follow || o->chain || o->has_type || o->actor ||
         o->invocation) &&
        !o->run) {
        cli_error("--full, --follow, --chain, --type, --actor and "
                  "--invocation need --run ID");
        return CLI_EXIT_USAGE;
    }
    if (o->has_status && o->run) {
        cli_error("--status filters the run list; it cannot be combined with "
                  "--run");
        return CLI_EXIT_USAGE;
    }
    if (o->schedules && (o->run || o->verify || o->stats || o->has_status ||
                         o->policy || o->has_since)) {
        cli_error("--schedules lists the schedules; it takes only --format");
        return CLI_EXIT_USAGE;
    }
    if ((o->verify && (o->stats || o->follow || o->chain)) ||
        (o->stats && o->run) || (o->follow && o->format == FMT_JSON)) {
        cli_error("--verify, --stats, --chain and --follow do not combine that "
                  "way (see --help)");
        return CLI_EXIT_USAGE;
    }
    /* a filter these would not apply is refused, not ignored: a script
     * asking --verify --status failed must not get every run's answer */
    if ((o->verify || o->stats || o->chain) &&
        (o->has_status || o->policy || o->has_since || o->has_type ||
         o->actor || o->invocation || o->full || o->follow)) {
        cli_error("%s takes no filter (--status, --policy, --since, --type, "
                  "--actor, --invocation) nor --full or --follow",
                  o->verify  ? "--verify"
                  : o->stats ? "--stats"
                             : "--chain");
        return CLI_EXIT_USAGE;
    }
    return -1; /* go on */
}

int main(int argc, char **argv)
{
    cli_set_name(argc > 0 ? argv[0] : NULL);
    opts o;
    int rc = parse_args(&o, argc, argv);
    if (rc >= 0)
        return rc;
    pl_engine *e;
    pl_registry *reg;
    if (!cli_open_store(&e, &reg, o.store))
        return CLI_EXIT_STORE;
    if (o.schedules)
        rc = cmd_schedules(e, &o);
    else if (o.verify)
        rc = cmd_verify(e, &o);
    else if (o.stats)
        rc = cmd_stats(e, &o);
    else if (o.chain)
        rc = cmd_chain(e, &o);
    else if (o.run)
        rc = cmd_run(e, &o);
    else
        rc = cmd_list(e, &o);
    if (!cli_stdout_ok() && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_STORE;
    cli_close_store(e, reg);
    return rc;
}
