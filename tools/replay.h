/*
 * replay.h -- what the files of ledger-replay share: its options, the state
 * of one invocation, how it reports runs, and one function per mode.
 * ledger-replay.c parses the command line and dispatches; replay_report.c
 * reports (and opens --trace and --otel); replay_run.c continues, resumes
 * and forks; replay_check.c is --check; replay_versions.c tallies what
 * --check saw of code versions and code identities (and the deploy gate,
 * --check --live); replay_upgrade.c is --upgrade; replay_queue.c is
 * --import, --submit and --worker; replay_time.c is --signal, --cancel and
 * --wake; replay_sched.c --schedule-put and --schedule-delete;
 * replay_retention.c --prune and --worker's --retain (their usage, flags
 * and checks too).
 */
#ifndef PL_REPLAY_H
#define PL_REPLAY_H

#include <policyledger_mcp.h>

#include "mcp_flags.h"
#include "runview.h"

#define EXIT_USAGE CLI_EXIT_USAGE
#define EXIT_OPEN CLI_EXIT_STORE
#define EXIT_SUSPENDED 4
#define EXIT_FAILED 5
#define EXIT_SCHEDULE 3 /* --wake: the due runs woken, a schedule failed */

/* The largest --answer read from a file or stdin. */
#define ANSWER_MAX ((size_t)16 << 20)

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
    MODE_UPGRADE,
    MODE_SCHED_PUT,
    MODE_SCHED_DELETE,
    MODE_SIGNAL,
    MODE_CANCEL,
    MODE_WAKE,
    MODE_PRUNE
};

typedef struct options {
    const char *store;
    const char **plugins;
    size_t n_plugins;
    mcp_flags mcp;      /* --mcp NAME=SPEC, --mcp-env, --mcp-token-env */
    bool mcp_unchecked; /* --mcp-unchecked: pl_mcp_options.unchecked_schemas */
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
    int priority;         /* --priority N (offset by PL_PRIORITY_MAX + 1:
                             0 = not given) */
    const char *key;      /* --key K */
    unsigned key_limit;   /* --key-limit N */
    const char *retain;   /* --worker's --retain DURATION */
    /* --worker's --retain-failed DURATION */
    const char *retain_failed;
    /* --prune */
    const char *older_than; /* --older-than DURATION or DATE */
    const char *status;     /* --status LIST */
    const char *archive;    /* --archive DIR */
    /* deploying changes: --check --live, --upgrade */
    bool live;         /* --live: only runs not yet final */
    bool all_diverged; /* --all-diverged */
    bool dry_run;      /* --dry-run (--prune, --upgrade) */
    /* schedules: --schedule-put, --schedule-delete */
    const char *sched_put, *sched_delete; /* the schedule's name */
    const char *cron, *zone, *policy;     /* --cron, --zone, --policy */
    const char *overlap, *catch_up;       /* --overlap, --catch-up */
    const char *deadline;                 /* --deadline DURATION */
    /* time: --signal, --cancel */
    const char *name;   /* --name EVENT */
    const char *reason; /* --reason TEXT */
} options;

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

typedef struct id_list {
    char **v;
    size_t n;
    bool oom;
} id_list;

/* A version point a replay passed (PL_EVENT_VERSION). */
typedef struct version_seen {
    char *change;
    int version;
    bool recorded; /* its marker is in the ledger; else the default */
    int status;    /* PL_ECODEVERSION: this code does not support it */
    char *path;    /* where: its invocation and position */
    uint32_t seq;
} version_seen;

/* A run --wake continued: what its events said (pl_engine_wake() gives no
 * outcomes). */
typedef struct woken {
    char *id;
    uint64_t served, executed, elapsed_ns;
    uint64_t replayed, appended; /* steps, as pl_outcome counts them */
    bool ended; /* it completed, failed, suspended or parked again */
} woken;

typedef struct watch {
    code_change *changes;
    size_t n_changes;
    version_seen *versions;
    size_t n_versions;
    divergence div;
    bool oom;
    pl_trace *trace; /* --trace */
    pl_otel *otel;   /* --otel */
    bool wake;       /* --wake: note the runs it continues */
    woken *woken;
    size_t n_woken;
    int sched_st;     /* --wake: a schedule's failure (its event) */
    char *sched_msg;  /* and its message */
    char *sched_name; /* and the schedule's name (NULL: not known) */
} watch;

/* Live runs by a key: a change and a version, or a code identity. */
typedef struct tally_row {
    char *key;
    int version;
    bool is_default;
    id_list runs;
} tally_row;

typedef struct tally {
    tally_row *v;
    size_t n;
    bool oom;
} tally;

typedef struct tool {
    options opt;
    pl_registry *reg;
    pl_engine *engine;
    pl_mcp **mcps; /* --mcp's servers, t.opt.mcp.n of them */
    watch w;
    cJSON *runs;    /* --json: one summary per run */
    cJSON *skipped; /* --json: runs --all left alone */
    int exit;       /* the worst so far */
    /* inputs checked before the store is opened (see prepare_*) */
    cJSON *payload;       /* --submit's, --signal's, --schedule-put's */
    cJSON *answer;        /* --resume's */
    FILE *import_in;      /* --import's, checked and rewound */
    pl_schedule schedule; /* --schedule-put's */
    unsigned n_ok, n_suspended, n_failed, n_diverged, n_skipped;
    unsigned n_refused;        /* runs the engine refused to execute */
    int refused_st;            /* the last one's status (report_refused()) */
    unsigned n_newer;          /* recorded by newer code (PL_ENEWERCODE) */
    uint64_t prune_older_ms;   /* --older-than, read */
    unsigned prune_statuses;   /* --status, read */
    bool prune_archive_failed; /* --archive: a run's export stopped it */
    /* --prune: the runs offered (archived) whose end is not yet known, in
     * the order the prune says it, from prune_head; and those left */
    struct prune_line *prune_lines;
    size_t prune_head, prune_n, prune_cap;
    uint64_t prune_skipped;
    uint64_t retain_ms; /* --retain, read */
    /* --retain-failed, read */
    uint64_t retain_failed_ms;
    /* --check: live runs by version and by code identity; the gate */
    tally versions, codes;
    id_list would_fail; /* live runs the loaded code cannot replay */
    id_list damaged;    /* runs whose record cannot be read, passed over */
    unsigned n_live;
    cJSON *summary;    /* --json: added to the document */
    cJSON *sched_json; /* --json: --schedule-put's schedule */
    bool printed;      /* --json: the document is out */
    int why; /* the library's status of the first refusal: --json's error */
    id_list said;    /* the runs summed up on stdout, named if it is lost */
    bool trace_made; /* --trace FILE did not exist: this process made it */
} tool;

/* ---- replay_time.c ---- */

/* --wake: fold one event into the runs it continued. */
void watch_woken(watch *w, const pl_event *ev);

/* ---- replay_report.c ---- */

double now_ms(void);
char *dup_or_null(const char *s, bool *oom);
/* Forget what a replay saw; the trace and the exporter stay. */
void watch_clear(watch *w);
/* Note a change of code first seen at @p step_id. */
void watch_add_change(watch *w, const char *step_id, const char *recorded,
                      const char *now);
/* The engine's event callback: the trace, the exporter, what --check shows. */
void on_event(const pl_event *ev, void *user);
void worst(tool *t, int code);
cJSON *json_str_or_null(const char *s);
const char *or_dash(const char *s);
/* The runs refused, each with its status: " (ID: PL_X, ...)" printed
 * (nothing for none), or a summary's "refused": [{run_id, error}] (NULL
 * when out of memory). */
void print_refused(const id_list *ids, const int *why);
cJSON *json_refused(const id_list *ids, const int *why);
/* The mode's --json summary: @p sum (taken) when @p ok, else none, and
 * the document says it ran out of memory. */
void set_summary(tool *t, cJSON *sum, bool ok);
/* The mode's name, as --json's "mode" gives it. */
const char *mode_name(enum mode m);
/* --json's one document, printed whatever the command came to (once):
 * its runs, the exit status @p rc, and for a failure the first message
 * said and @p error, the library's status where one says why.  Returns
 * the exit status. */
int print_document(tool *t, int rc, const char *error);
/* The runs whose summaries a lost output took with it, on stderr. */
void say_lost(const tool *t);
cJSON *json_run(tool *t, const char *id);
void json_counters(cJSON *j, const pl_outcome *o, double ms);
void report_outcome(tool *t, const pl_outcome *o, double ms, const char *note);
void report_refused(tool *t, const char *id, int st, int code);
/* A run whose record cannot be read (@p msg says why), passed over by a
 * mode that walks every run: said on stderr, in --json's skipped, noted in
 * t->damaged, and the exit status is 2.  A cli_damaged_fn's answer: 0. */
int report_damaged(tool *t, const char *id, const char *msg);
int refused_code(int st);
/* --trace and --otel: open what the options ask for (0, or -1 after an
 * error said); send what is left and close both (a loss is a warning).  A
 * trace file the command made and left empty is removed when it exits
 * @p rc 1 or 2: a refused command creates no file. */
int open_observers(tool *t);
void close_observers(tool *t, int rc);
int write_code(int st);
void ids_free(id_list *l);
bool ids_push(id_list *l, const char *id);

/* ---- the modes ---- */

/*
 * Check a mode's inputs before the store is opened, so that a refused
 * command opens, creates and writes nothing: 0, or the exit status.
 */
int prepare_resume(tool *t);
int prepare_submit(tool *t);
int prepare_import(tool *t);
int prepare_prune(tool *t);
int prepare_worker(tool *t); /* replay_retention.c: --retain(-failed) */
int prepare_schedule(tool *t);
/* replay_sched.c: --schedule-put, --schedule-delete */
void mode_schedule(tool *t);
int prepare_signal(tool *t);

void continue_one(tool *t, const char *id, const char *note);
int need_run(tool *t, const char *id);
void mode_all(tool *t);
void mode_resume(tool *t);
void mode_fork(tool *t);
void mode_check(tool *t);
void mode_import(tool *t);
void mode_worker(tool *t);
void mode_submit(tool *t);
void mode_prune(tool *t); /* replay_retention.c */

/* ---- replay_retention.c: --prune's part of --help, its flags ---- */
void usage_retention(FILE *f);
/* Where --retain, --retain-failed, --older-than, --status or --archive
 * keep their value; NULL for another flag. */
const char **retention_slot(options *o, const char *flag);
/* Each retention flag with its mode: 0, or -1 after a usage error. */
int check_retention_args(const options *o);
void mode_upgrade(tool *t);

/* ---- replay_versions.c ---- */

/* Is a run of this status live (not final)? */
bool is_live(pl_run_status s);
/* Note what the check of live run @p id saw: its versions, its code. */
void tally_run(tool *t, const char *id, const char *code);
/* Print (or put in t->summary) the tallies and, with --live, the gate. */
void report_tallies(tool *t);
void tallies_free(tool *t);
/* The versions the replay of a run passed, for its JSON summary. */
cJSON *json_versions(const watch *w);
void mode_signal(tool *t);
void mode_cancel(tool *t);
void mode_wake(tool *t);

#endif /* PL_REPLAY_H */
