/*
 * pl-bench -- policyledger against the physical floor.
 *
 *   pl-bench [--quick] [--json] [--dir DIR] [--only w1,...,w8,fanout,rate,mcp]
 *   pl-bench [--quick] [--json] --store postgresql://...   (see report_pg)
 *
 * Every workload runs in a fresh child process (so peak RSS is its own),
 * next to a raw-LMDB floor measured the same way, on the same disk, in the
 * same run:
 *
 *   W1 sequential  one run of N calls to a tool returning ~100 bytes of JSON;
 *                  calls/s, p50/p95 per call, peak RSS, commits per call.
 *                  Floor: raw LMDB, one put (MDB_APPEND, the keys being in
 *                  order) + commit per record, same durability; and
 *                  "rawcall", the same committing a call's records each
 *                  time (what storing a call costs).  The floors are plain
 *                  LMDB: they lengthen the file as they go, where the
 *                  engine's synced modes keep a zeroed tail past it (see
 *                  lmdb_env.c), so a ratio includes what that saves.
 *   W2 recovery    a run of 2M calls SIGKILLed after M; the restart's time
 *                  to its first newly executed call and to completion, and
 *                  calls served vs executed.  Floor: opening raw LMDB and
 *                  reading the same number of records.
 *   W3 concurrency R runs x C calls, all in flight at once, two ways:
 *                  "threads", one thread per run, and "pool", the runs as
 *                  tasks of a pl_pool with a thread per CPU; total calls/s.
 *                  Floor: R threads doing raw put + commit per record.
 *   W4 replay      continue a finished run of N calls, every result served
 *                  from the ledger; steps/s, peak RSS (which includes the
 *                  LMDB file pages mapped) and the replay's own growth in
 *                  anonymous memory, for growing N.
 *                  Floor: a raw LMDB cursor scan of the same records.
 *   W5 agent turns an agent's loop: a policy under loop(K) + invoke_action
 *                  that asks for its ledger every turn (pl_ctx_ledger, as an
 *                  LLM policy does to build its conversation; it reads only
 *                  the last step, so the figure is the engine's share)
 *                  and calls the tool
 *                  until turn K; time per turn at K = 10, 100, 1000, in
 *                  process mode (no fsync, so reading shows).  Flat is the
 *                  goal: a turn must not cost more as the ledger grows.
 *                  Over HTTP: the LLM policy (openai+http) against a
 *                  loopback model server run by a thread of pl-bench, K =
 *                  10, 100, 1000 turns in sync and process mode, next to a
 *                  bare libcurl + cJSON loop making the same requests;
 *                  what the engine adds per turn, commits per turn, the
 *                  replay's requests (counted at the server) and time, and
 *                  store bytes per turn.
 *   fanout         call_all of 10 calls to a tool that waits 10 ms on I/O
 *                  against the same 10 calls one after another (wall time
 *                  per run); and the CPU time per call of a call bare,
 *                  under an empty retry and under validate, in process
 *                  mode.  No floor: the figures are ratios to each other.
 *   W6 workers     1,000 submitted runs of 10 calls drained by 1, 2 and 4
 *                  worker processes (pl_worker_run) sharing the store, in
 *                  sync mode; runs/s and the scaling over one worker.  No
 *                  floor: the figures are ratios to each other.
 *   W7 timers      N runs each sleeping a random 0..60 s (0..1 s with
 *                  --quick), parked on one store by one process while
 *                  worker processes (pl_worker_run: one on LMDB, four on
 *                  PostgreSQL) wake them, for N = 10,000 and 100,000
 *                  (200 and 2,000 with --quick): the workers' peak RSS
 *                  and peak anonymous RSS (flat in N is the goal: a
 *                  parked run holds no memory), store bytes per waiting
 *                  run, and wake lateness (woken minus due) p50/p99.
 *                  bench_time.c.
 *   W8 signal      a run parked waiting for an event; pl_run_signal()
 *                  continues it in the caller's thread, which consumes the
 *                  event and makes one call: the time from the signal to
 *                  the run's next step being durable, and to the call's
 *                  result being durable, sync mode.  Floor: one raw LMDB
 *                  put + commit, synced.  bench_time.c.
 *   rate           one rate limit shared by three processes (bench_rate.c).
 *
 * W1 and W3 run in each durability mode (sync, group, process).  Every
 * workload and its floor are repeated, interleaved, and the medians shown;
 * a ratio of two figures measured together (W1's engine to its floor, W3's
 * group to sync) is the median of the repetitions' own ratios, since the
 * host's speed drifts between repetitions.  W1's synced modes go further:
 * the run and its floors take turns at the disk every 100 calls, since a
 * flush's cost drifts within a repetition too.  Figures are printed as a
 * table, or with --json as one JSON document holding every figure and every
 * ratio to its floor, and end with the project's goals, each marked met or
 * missed by this run.  Nothing here is a pass/fail test: the exit status
 * says only whether every workload ran.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "cli.h"      /* cli_store_shown(): no password printed */
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* The rate workload (bench_rate.c) on a store of its own. */
static int report_rate(bool quick)
{
    char path[1200];
    path_in(path, sizeof path, "rate");
    int failures = bench_rate(quick, path);
    remove_store(path);
    return failures;
}

/* W1, W3, W6, W7, W8, rate and take (as @p only selects them) on PostgreSQL;
 * returns the failures. */
static int report_pg(bool quick, unsigned only)
{
    say("on PostgreSQL: %s\n\n", cli_store_shown(g_pg_uri));
    cJSON_AddStringToObject(g_json, "store", "postgresql");
    return (only & 1u << 1 ? report_pg_w1(quick) : 0) +
           (only & 1u << 3 ? report_pg_w3(quick) : 0) +
           (only & 1u << 6 ? report_w6(quick) : 0) +
           (only & 1u << 7 ? report_w7(quick) : 0) +
           (only & 1u << 8 ? report_w8() : 0) +
           (only & ONLY_RATE ? report_rate(quick) : 0) +
           (only & ONLY_TAKE ? report_take(quick) : 0);
}

int main(int argc, char **argv)
{
    unsigned only = ONLY_ALL;
    bool quick = false;
    const char *dir = NULL;
    unsigned given = 0; /* --dir, --store, --only: a bit each */
    for (int i = 1; i < argc; i++) {
        /* a flag of one value given again: refused, not the last taken */
        int k = !strcmp(argv[i], "--dir")     ? 1
                : !strcmp(argv[i], "--store") ? 2
                : !strcmp(argv[i], "--only")  ? 3
                                              : 0;
        if (k && (given & 1u << k)) {
            fprintf(stderr, "pl-bench: %s is given twice\n", argv[i]);
            return 2;
        }
        given |= k ? 1u << k : 0;
        if (!strcmp(argv[i], "--quick")) {
            quick = g_quick = true;
            g_reps = 1;
        } else if (!strcmp(argv[i], "--json"))
            g_print_json = true;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--store") && i + 1 < argc)
            g_pg_uri = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            if (!(only = parse_only(argv[++i]))) {
                fprintf(stderr,
                        "pl-bench: --only takes workloads " ONLY_NAMES ", "
                        "comma-separated, not '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dir") || !strcmp(argv[i], "--only") ||
                   !strcmp(argv[i], "--store")) {
            fprintf(stderr, "pl-bench: %s needs a value\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            fprintf(stderr, "pl-bench: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (g_pg_uri && ((strncmp(g_pg_uri, "postgresql://", 13) &&
                      strncmp(g_pg_uri, "postgres://", 11)) ||
                     strstr(g_pg_uri, "schema="))) {
        fprintf(stderr, "pl-bench: --store takes a postgresql:// URI "
                        "without schema= (it makes schemas of its own)\n");
        return 2;
    }
    /* with --store, a workload named that runs on LMDB only is refused,
     * not left out in silence */
    const unsigned on_pg = 1u << 1 | 1u << 3 | 1u << 6 | 1u << 7 | 1u << 8 |
                           ONLY_RATE | ONLY_TAKE | ONLY_CHURN;
    if (g_pg_uri && only != ONLY_ALL && (only & ~on_pg)) {
        fprintf(stderr, "pl-bench: with --store, --only takes w1, w3, w6, "
                        "w7, w8, rate, take and churn (the others run on "
                        "LMDB only)\n");
        return 2;
    }
    if (g_pg_uri) { /* a server that cannot be had: said before any
                       * directory is made (pg_connect() exits) */
        PGconn *c = PQconnectdb(g_pg_uri);
        bool up = PQstatus(c) == CONNECTION_OK;
        if (!up)
            fprintf(stderr, "pl-bench: cannot connect to %s: %s",
                    cli_store_shown(g_pg_uri), PQerrorMessage(c));
        PQfinish(c);
        if (!up)
            return 1;
    }
    if (dir) {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
        struct stat sb;
        if ((mkdir(g_dir, 0700) && errno != EEXIST) || stat(g_dir, &sb) ||
            !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "pl-bench: cannot use %s as a directory\n", g_dir);
            return 1;
        }
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/pl-bench.XXXXXX",
                 t && *t ? t : "/tmp");
        if (!mkdtemp(g_dir)) {
            fprintf(stderr, "pl-bench: cannot create a temporary directory\n");
            return 1;
        }
    }

    g_json = cJSON_CreateObject();
    struct utsname u;
    uname(&u);
    cJSON *machine = cJSON_AddObjectToObject(g_json, "machine");
    cJSON_AddStringToObject(machine, "system", u.sysname);
    cJSON_AddStringToObject(machine, "release", u.release);
    cJSON_AddStringToObject(machine, "arch", u.machine);
    jnum(machine, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddStringToObject(g_json, "mode", quick ? "quick" : "full");
    cJSON_AddStringToObject(g_json, "version", pl_version());
    say("policyledger %s benchmark (%s), stores in %s, %ld cpus\n\n",
        pl_version(), quick ? "quick" : "full", g_dir,
        sysconf(_SC_NPROCESSORS_ONLN));
    int failures = 0;

    if (g_pg_uri) { /* W1, W3, W6, W7, W8 and rate on PostgreSQL instead */
        failures += report_pg(quick, only);
        only &= ONLY_CHURN;
    }
    if (only & 1u << 1)
        failures += report_w1(quick);
    if (only & 1u << 2)
        failures += report_w2();
    if (only & 1u << 3)
        failures += report_w3(quick);
    if (only & 1u << 4)
        failures += report_w4(quick);
    if (only & 1u << 5)
        failures += report_w5(quick) + report_w5_stream(quick);
    if (only & ONLY_FANOUT)
        failures += report_fanout(quick);
    if (only & 1u << 6)
        failures += report_w6(quick);
    if (only & 1u << 7)
        failures += report_w7(quick);
    if (only & 1u << 8)
        failures += report_w8();
    if (only & ONLY_RATE)
        failures += report_rate(quick);
    if (only & ONLY_MCP)
        failures += report_mcp(quick);
    if (only & ONLY_TAKE) /* on LMDB, a wake's keys alone */
        failures += report_take(quick);
    churn_report cr = {quick, g_print_json, g_dir, g_pg_uri, g_json};
    failures += (only & ONLY_CHURN ? churn_report_run(&cr) : 0) +
                (only & ONLY_AGENT && !g_pg_uri
                     ? agent_chain_report(quick, g_print_json, g_dir, g_json)
                     : 0);
    report_goals(quick);

    jnum(g_json, "failures", failures);
    if (g_print_json) {
        char *s = cJSON_Print(g_json);
        puts(s);
        free(s);
    }
    cJSON_Delete(g_json);
    if (!dir)
        rmdir(g_dir);
    return failures ? 1 : 0;
}
