/*
 * replay_retention.c -- ledger-replay's retention commands: --prune
 * deletes the runs that ended long enough ago (pl_engine_prune()), in
 * bounded batches, each first written to an archive directory when asked:
 * its verified export (the JSON lines of `ledger-dump --run ID --format
 * jsonl`), made durable (the file and its directory fsynced) before the
 * run is deleted; --worker --retain and --retain-failed make a worker
 * apply a retention rule (pl_worker_options.retain_ms, .retain_failed_ms).
 * Their usage, flags and checks are here.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay.h"

/* The statuses of runs that have ended for good: those a prune deletes. */
static const pl_run_status final_statuses[] = {
    PL_RUN_COMPLETED, PL_RUN_FAILED, PL_RUN_CANCELLED, PL_RUN_SUPERSEDED,
    PL_RUN_CONTINUED};

void usage_retention(FILE *f)
{
    fputs("  --prune --older-than DURATION|DATE [--status LIST] [--archive "
          "DIR] [--dry-run]\n"
          "                        delete the runs that ended at least "
          "DURATION ago (30d,\n"
          "                        12h, 90m, 45s; 0s: all) or before a past "
          "ISO 8601 DATE,\n"
          "                        in short transactions of a few\n"
          "                        runs.  LIST: the final statuses to delete, "
          "of completed,\n"
          "                        failed, cancelled, superseded, continued "
          "(default: all).\n"
          "                        Each keeps a tombstone (ledger-dump says "
          "when it was\n"
          "                        deleted).  With --archive, each run's "
          "verified export\n"
          "                        is written to DIR/ID.jsonl and synced first "
          "(ledger-\n"
          "                        replay --import loads it back).  --dry-run "
          "lists, and\n"
          "                        deletes nothing.  Needs no --plugin.\n"
          "  --worker --retain DURATION [--retain-failed DURATION]\n"
          "                        the worker's retention rule: it deletes "
          "the runs that\n"
          "                        ended at least DURATION ago, as --prune "
          "does, at start\n"
          "                        and then every tenth of DURATION (a "
          "second to a minute\n"
          "                        apart); --retain-failed: failed and "
          "cancelled runs after\n"
          "                        its own DURATION instead (kept longer, "
          "to look into;\n"
          "                        it may be given alone: then completed "
          "runs are kept)\n",
          f);
}

const char **retention_slot(options *o, const char *flag)
{
    return !strcmp(flag, "--retain")          ? &o->retain
           : !strcmp(flag, "--retain-failed") ? &o->retain_failed
           : !strcmp(flag, "--older-than")    ? &o->older_than
           : !strcmp(flag, "--status")        ? &o->status
           : !strcmp(flag, "--archive")       ? &o->archive
                                              : NULL;
}

int check_retention_args(const options *o)
{
    if ((o->retain || o->retain_failed) && o->mode != MODE_WORKER) {
        cli_error("%s goes with --worker",
                  o->retain ? "--retain" : "--retain-failed");
        return -1;
    }
    if ((o->older_than || o->status || o->archive) && o->mode != MODE_PRUNE) {
        cli_error("--older-than, --status and --archive go with --prune");
        return -1;
    }
    if (o->dry_run && o->mode != MODE_UPGRADE && o->mode != MODE_PRUNE) {
        cli_error("--dry-run goes with --upgrade or --prune");
        return -1;
    }
    return 0;
}

/* "completed,failed" into a mask of (1u << status); 0 on a bad list. */
static unsigned parse_statuses(const char *list)
{
    unsigned mask = 0;
    const char *p = list;
    while (p && *p) {
        size_t n = strcspn(p, ",");
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof final_statuses / sizeof *final_statuses;
             i++) {
            const char *name = pl_run_status_name(final_statuses[i]);
            if (strlen(name) == n && !strncmp(p, name, n))
                bit = 1u << final_statuses[i];
        }
        if (!bit)
            return 0;
        mask |= bit;
        p += n;
        if (*p == ',' && !*++p)
            return 0; /* a trailing comma */
    }
    return mask;
}

int prepare_prune(tool *t)
{
    options *o = &t->opt;
    int64_t now = cli_now_us(), since;
    if (!o->older_than) {
        cli_error("--prune needs --older-than DURATION (30d, 12h, 90m, 45s, "
                  "or 0s for every ended run)");
        return EXIT_USAGE;
    }
    if (!cli_parse_time(&since, o->older_than, now) || since > now) {
        cli_error("bad --older-than %s: give a duration (30d, 12h, 90m, "
                  "45s) or a past ISO 8601 date",
                  QUOTE(o->older_than));
        return EXIT_USAGE;
    }
    t->prune_older_ms = (uint64_t)(now - since) / 1000;
    if (o->status && !(t->prune_statuses = parse_statuses(o->status))) {
        cli_error("bad --status %s: a comma-separated list of final "
                  "statuses (completed, failed, cancelled, superseded, "
                  "continued)",
                  QUOTE(o->status));
        return EXIT_USAGE;
    }
    struct stat sb;
    if (o->archive && (stat(o->archive, &sb) || !S_ISDIR(sb.st_mode))) {
        cli_error("--archive %s is not a directory", QUOTE(o->archive));
        return EXIT_USAGE;
    }
    return 0;
}

/* A worker's --retain or --retain-failed DURATION, in ms (0 when not
 * given); -1 after a usage error.  A duration only: a date is no age. */
static int64_t retain_arg(const char *flag, const char *value)
{
    int64_t ms;
    if (!value)
        return 0;
    if (!cli_parse_duration_ms(&ms, value)) {
        cli_error("bad %s %s: give a duration (30d, 12h, 90m, 45s)", flag,
                  QUOTE(value));
        return -1;
    }
    return ms;
}

int prepare_worker(tool *t)
{
    int64_t ms = retain_arg("--retain", t->opt.retain);
    int64_t failed_ms = retain_arg("--retain-failed", t->opt.retain_failed);
    if (ms < 0 || failed_ms < 0)
        return EXIT_USAGE;
    t->retain_ms = (uint64_t)ms;
    t->retain_failed_ms = (uint64_t)failed_ms;
    return 0;
}

/* The first line of file @p path (its export's run record) parsed, or
 * NULL (no such file, no line within @p max bytes, not JSON). */
static cJSON *first_line(const char *path, size_t max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL;
    size_t cap = 0, len = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n' && len < max) {
        if (len + 1 >= cap) {
            char *g = realloc(line, cap = cap ? 2 * cap : 4096);
            if (!g)
                break;
            line = g;
        }
        line[len++] = (char)c;
    }
    bool whole = c == '\n' && line;
    fclose(f);
    cJSON *j = NULL;
    if (whole) {
        line[len] = '\0';
        j = cJSON_Parse(line);
    }
    free(line);
    return j;
}

/* Whether exports @p a and @p b are of one run: the same id, number and
 * creation time in their run records. */
static bool same_run(const cJSON *a, const cJSON *b)
{
    static const char *const keys[] = {"run", "run_number", "created_us"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, keys[i]);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, keys[i]);
        if (!x || !y || !cJSON_Compare(x, y, true))
            return false;
    }
    return true;
}

/* An archive at @p path already (none: PL_OK) may be replaced by @p part
 * only when it is of the same run (a prune killed after the export, before
 * the delete): another run's, under the same id (another store's, or this
 * one's once the tombstone freed its id), is its only copy. */
static int archive_free(const char *path, const char *part)
{
    struct stat sb;
    if (lstat(path, &sb))
        return errno == ENOENT ? PL_OK
                               : pl_errorf(PL_EIO, "cannot look at %s: %s",
                                           path, strerror(errno));
    cJSON *was = S_ISREG(sb.st_mode) ? first_line(path, (size_t)1 << 30) : NULL;
    cJSON *now = was ? first_line(part, (size_t)1 << 30) : NULL;
    bool same = was && now && same_run(was, now);
    cJSON_Delete(was);
    cJSON_Delete(now);
    if (same)
        return PL_OK;
    return pl_errorf(PL_EEXIST,
                     "%s holds the export of another run (or is no "
                     "export): it is not replaced (move it away, or "
                     "archive to another directory)",
                     path);
}

/* Write run @p id's verified export to DIR/ID.jsonl, durably, never over
 * another run's. */
static int archive_run(const char *dir, pl_engine *e, const char *id,
                       char *path, size_t n)
{
    char part[4200];
    snprintf(path, n, "%s/%s.jsonl", dir, id);
    snprintf(part, sizeof part, "%s.part", path);
    int st = pl_run_verify(e, id);
    if (st)
        return st;
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return pl_errorf(PL_EIO, "cannot write %s: %s", part, strerror(errno));
    }
    st = pl_run_export(e, id, f);
    if (!st && (fflush(f) || fsync(fileno(f))))
        st = pl_errorf(PL_EIO, "cannot write %s: %s", part, strerror(errno));
    if (fclose(f) && !st)
        st = pl_errorf(PL_EIO, "cannot write %s: %s", part, strerror(errno));
    if (!st)
        st = archive_free(path, part);
    if (!st && rename(part, path))
        st = pl_errorf(PL_EIO, "cannot rename %s: %s", part, strerror(errno));
    int dfd = st ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!st && (dfd < 0 || fsync(dfd)))
        st = pl_errorf(PL_EIO, "cannot sync the directory %s: %s", dir,
                       strerror(errno));
    if (dfd >= 0)
        close(dfd);
    if (st)
        unlink(part);
    return st;
}

/* A run offered to the prune, until it says what became of it. */
typedef struct prune_line {
    char *id;
    const char *status;
    char when[40];
    char *archive; /* NULL: not archived */
} prune_line;

static void prune_lines_free(tool *t)
{
    for (size_t i = 0; i < t->prune_n; i++) {
        free(t->prune_lines[i].id);
        free(t->prune_lines[i].archive);
    }
    free(t->prune_lines);
    t->prune_lines = NULL;
    t->prune_head = t->prune_n = t->prune_cap = 0;
}

/* Each run chosen, before it is deleted: archived, and kept to be reported
 * once the prune says what became of it (finished()). */
static int chosen(const pl_run_info *info, void *user)
{
    tool *t = user;
    char path[4200] = "";
    if (t->opt.archive && !t->opt.dry_run) {
        int st = archive_run(t->opt.archive, t->engine, info->id, path,
                             sizeof path);
        if (st) {
            cli_error("cannot archive run %s: %s (%s): it is not deleted, "
                      "and the prune stops",
                      QUOTE(info->id), pl_errmsg(), pl_status_name(st));
            t->prune_archive_failed = true;
            return st;
        }
    }
    if (t->prune_head == t->prune_n) /* every line said: start again */
        prune_lines_free(t);
    if (t->prune_n == t->prune_cap) {
        size_t cap = t->prune_cap ? 2 * t->prune_cap : 64;
        prune_line *g = realloc(t->prune_lines, cap * sizeof *g);
        if (!g)
            return pl_errorf(PL_ENOMEM, "out of memory");
        t->prune_lines = g;
        t->prune_cap = cap;
    }
    prune_line *l = &t->prune_lines[t->prune_n];
    memset(l, 0, sizeof *l);
    l->id = strdup(info->id);
    l->archive = *path ? strdup(path) : NULL;
    if (!l->id || (*path && !l->archive)) {
        free(l->id);
        free(l->archive);
        return pl_errorf(PL_ENOMEM, "out of memory");
    }
    l->status = pl_run_status_name(info->status);
    cli_time_iso(l->when, sizeof l->when, info->updated_us, false);
    t->prune_n++;
    return 0;
}

/* Why the prune left a run it chose (pl_prune_done_fn's status). */
static const char *left_why(int status)
{
    return status == PL_EBUSY
               ? "it changed after it was chosen, or a worker holds it"
           : status == PL_ENOTFOUND ? "it was deleted meanwhile"
                                    : "it is no longer one to delete (it "
                                      "runs again, or no longer matches)";
}

/* What became of each run chosen, said once it is durable. */
static void finished(const char *id, int status, void *user)
{
    tool *t = user;
    prune_line *l = NULL;
    if (t->prune_head < t->prune_n &&
        !strcmp(t->prune_lines[t->prune_head].id, id))
        l = &t->prune_lines[t->prune_head++]; /* else: left before offered */
    const char *action = status           ? "skipped"
                         : t->opt.dry_run ? "would delete"
                                          : "deleted";
    t->prune_skipped += status != PL_OK;
    const char *archive = l ? l->archive : NULL;
    cJSON *j = json_run(t, id);
    if (j) {
        cJSON_AddItemToObject(j, "status",
                              json_str_or_null(l ? l->status : NULL));
        cJSON_AddItemToObject(j, "ended", json_str_or_null(l ? l->when : NULL));
        cJSON_AddStringToObject(j, "action", action);
        cJSON_AddItemToObject(j, "archive", json_str_or_null(archive));
        if (status) {
            cJSON_AddStringToObject(j, "reason", left_why(status));
            cJSON_AddStringToObject(j, "error", pl_status_name(status));
        }
    } else if (!t->opt.json) {
        printf("%s %s", action, cli_text(id));
        if (l)
            printf(" (%s, ended %s)", l->status, l->when);
        if (status)
            printf(": %s", left_why(status));
        if (archive)
            printf("%sarchived to %s", status ? "; " : ", ", cli_text(archive));
        printf("\n");
    }
}

void mode_prune(tool *t)
{
    pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
    po.older_than_ms = t->prune_older_ms;
    po.statuses = t->prune_statuses;
    po.dry_run = t->opt.dry_run;
    po.before = chosen;
    po.after = finished;
    po.user = t;
    uint64_t n = 0;
    int st = pl_engine_prune(t->engine, &po, &n);
    /* a run whose export failed stopped the prune there, whatever the
     * status (a damaged ledger's PL_ECORRUPT too), unlike a run record
     * passed over, which the prune goes past */
    if (st == PL_ECORRUPT && !t->prune_archive_failed) {
        /* past it: the other runs were chosen (and deleted) all the same */
        cli_error("%s (PL_ECORRUPT): a run whose record cannot be read is "
                  "not deleted (ledger-dump --verify says more); the others "
                  "%s",
                  pl_errmsg(),
                  t->opt.dry_run ? "were chosen as a prune would choose them"
                                 : "were pruned");
        worst(t, EXIT_OPEN);
    } else if (st) {
        cli_error("prune stopped: %s (%s); %llu run(s) %s before it",
                  pl_errmsg(), pl_status_name(st), (unsigned long long)n,
                  t->opt.dry_run ? "chosen" : "deleted");
        worst(t, st == PL_EINVAL && !t->prune_archive_failed ? EXIT_USAGE
                                                             : EXIT_FAILED);
    }
    prune_lines_free(t);
    if (!t->opt.json)
        printf("%llu run(s) %s, %llu skipped\n", (unsigned long long)n,
               t->opt.dry_run ? "would be deleted" : "deleted",
               (unsigned long long)t->prune_skipped);
    cJSON *sum = cJSON_CreateObject();
    if (sum) {
        cJSON_AddNumberToObject(sum, "deleted", (double)n);
        cJSON_AddNumberToObject(sum, "skipped", (double)t->prune_skipped);
    }
    set_summary(t, sum, sum != NULL);
}
