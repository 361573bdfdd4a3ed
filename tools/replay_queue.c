/*
 * replay_queue.c -- ledger-replay --import, --worker and --submit.
 */
#define _GNU_SOURCE /* fopencookie() */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* stdin read through a tee: what is read is also written to a file of its
 * own, so that the export is checked as it comes (a stream that never
 * ends, or is no export, is refused at its first bad line rather than
 * copied whole first) and can then be read again from the copy. */
static ssize_t tee_read(void *cookie, char *buf, size_t size)
{
    size_t n = fread(buf, 1, size, stdin);
    if (n && fwrite(buf, 1, n, cookie) != n) {
        errno = EIO;
        return -1;
    }
    return ferror(stdin) ? -1 : (ssize_t)n;
}

/* The whole export is checked (every hash and chain) before the store is
 * opened, let alone created: a refused import leaves no file behind. */
int prepare_import(tool *t)
{
    const char *path = t->opt.import;
    bool piped = !strcmp(path, "-");
    FILE *in = piped ? tmpfile() : fopen(path, "rb"), *tee = NULL;
    cookie_io_functions_t tee_io = {.read = tee_read};
    if (in && piped && !(tee = fopencookie(in, "r", tee_io))) {
        fclose(in);
        in = NULL;
    }
    if (!in) {
        cli_error("cannot open the export %s: %s", QUOTE(path),
                  errno ? strerror(errno) : "cannot copy stdin");
        return EXIT_USAGE;
    }
    char *id = NULL;
    int st = pl_run_import(&id, NULL, tee ? tee : in, t->opt.new_id);
    free(id);
    if (tee && fclose(tee) && !st)
        st = pl_errorf(PL_EIO, "cannot copy stdin: %s", strerror(errno));
    if (!st && (fflush(in) || fseek(in, 0, SEEK_SET)))
        st = pl_errorf(PL_EIO, "cannot read the export again: %s",
                       strerror(errno));
    if (st) {
        fclose(in);
        cli_error("cannot import %s: %s (%s)", QUOTE(path), pl_errmsg(),
                  pl_status_name(st));
        t->why = st;
        /* a changed export is refused; anything else is a bad request */
        return st == PL_ECORRUPT ? EXIT_FAILED : EXIT_USAGE;
    }
    t->import_in = in;
    return 0;
}

void mode_import(tool *t)
{
    const char *path = t->opt.import;
    char *id = NULL;
    int st = pl_run_import(&id, t->engine, t->import_in, t->opt.new_id);
    if (st) {
        cli_error("cannot import %s: %s (%s)", QUOTE(path), pl_errmsg(),
                  pl_status_name(st));
        t->why = st;
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
        printf("%s: imported from %s: %s, %llu steps\n", cli_text(id),
               strcmp(path, "-") ? cli_text(path) : "stdin",
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

void mode_worker(tool *t)
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
    uint64_t done = 0, susp = 0, waiting = 0, failed = 0, cancelled = 0,
             skipped = 0;
    pl_worker_options wo = PL_WORKER_OPTIONS_INIT;
    wo.concurrency = t->opt.concurrency;
    wo.retain_ms = t->retain_ms;
    wo.retain_failed_ms = t->retain_failed_ms;
    wo.completed = &done;
    wo.suspended = &susp;
    wo.failed = &failed;
    wo.skipped = &skipped;
    wo.waiting = &waiting;
    wo.cancelled = &cancelled;
    int st = pl_worker_run(t->engine, &wo);
    if (st) {
        cli_error("the worker stopped: %s (%s)", pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
    }
    if (!t->opt.json)
        fprintf(stderr,
                "%s: worker stopped: %llu completed, %llu suspended, %llu "
                "waiting, %llu failed, %llu cancelled, %llu not executed\n",
                cli_name(), (unsigned long long)done, (unsigned long long)susp,
                (unsigned long long)waiting, (unsigned long long)failed,
                (unsigned long long)cancelled, (unsigned long long)skipped);
    else { /* the tallies, as --wake's next due: runs holds runs only */
        cJSON *j = cJSON_CreateObject();
        if (j) {
            cJSON_AddNumberToObject(j, "completed", (double)done);
            cJSON_AddNumberToObject(j, "suspended", (double)susp);
            cJSON_AddNumberToObject(j, "waiting", (double)waiting);
            cJSON_AddNumberToObject(j, "failed", (double)failed);
            cJSON_AddNumberToObject(j, "cancelled", (double)cancelled);
            cJSON_AddNumberToObject(j, "not_executed", (double)skipped);
            cJSON_Delete(t->summary);
            t->summary = j;
        }
    }
}

/* How deep @p item nests: 1 for an object of scalars. */
static int json_depth(const cJSON *item)
{
    int most = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        int d = json_depth(c);
        most = d > most ? d : most;
    }
    return cJSON_IsObject(item) || cJSON_IsArray(item) ? most + 1 : 0;
}

/* The payload, policy and id are checked before the store is opened, let
 * alone created: a refused submit leaves no file behind. */
int prepare_submit(tool *t)
{
    char q[CLI_QUOTE_MAX];
    if (!pl_registry_find(t->reg, t->opt.submit)) {
        cli_error("no policy %s in the plugins given",
                  cli_quote(q, sizeof q, t->opt.submit));
        return EXIT_USAGE;
    }
    if (t->opt.new_id && !cli_run_id_ok(t->opt.new_id)) {
        cli_error("bad --new-id %s: a run id is 1 to %d bytes of "
                  "[A-Za-z0-9._:@~-]",
                  cli_quote(q, sizeof q, t->opt.new_id), PL_MAX_RUN_ID);
        return EXIT_USAGE;
    }
    t->payload = cli_parse_object(t->opt.payload, "--payload");
    if (!t->payload)
        return EXIT_USAGE;
    if (json_depth(t->payload) > PL_MAX_JSON_DEPTH) {
        cli_error("--payload nests deeper than %d levels", PL_MAX_JSON_DEPTH);
        return EXIT_USAGE;
    }
    return 0;
}

void mode_submit(tool *t)
{
    pl_action root = PL_ACTION_INIT;
    root.policy = t->opt.submit;
    root.payload = t->payload;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = t->opt.new_id;
    if (t->opt.priority)
        ro.priority = t->opt.priority - PL_PRIORITY_MAX - 1;
    ro.concurrency_key = t->opt.key;
    ro.concurrency_limit = t->opt.key_limit;
    char *id = NULL;
    int st = pl_run_submit(&id, t->engine, &root, &ro);
    if (st) {
        cli_error("cannot submit a run of %s: %s (%s)", QUOTE(t->opt.submit),
                  pl_errmsg(), pl_status_name(st));
        worst(t, write_code(st));
    } else {
        /* run_id as every mode's summary has it; run as it was first */
        cJSON *j = json_run(t, id);
        if (j) {
            cJSON_AddStringToObject(j, "run", id);
            cJSON_AddStringToObject(j, "status", "submitted");
        }
        if (!t->opt.json)
            printf("%s\n", cli_text(id));
    }
    free(id);
}
